#!/usr/bin/env python3
"""Writes a copy of a build's compile_commands.json that clang-tidy can read, for
scripts/check-tidy.sh and scripts/check-function-size.sh. Changed in two ways:
- a unity build (STOKE_UNITY_BUILD) compiles a batch of files as one unity_N_cxx.cxx,
  and the database names only the batches: each file of a batch gets the batch's command;
- GCC's precompiled header (STOKE_TORCH_PCH) is not one clang can load: it is left out,
  and each file is read with the includes it names itself.
Usage: tidy-database.py BUILD/compile_commands.json OUT/compile_commands.json"""
import json
import re
import sys

entries = []
for entry in json.load(open(sys.argv[1])):
    if not re.search(r"/Unity/unity_\d+_cxx\.cxx$", entry["file"]):
        entries.append(entry)
        continue
    for source in re.findall(r'^#include "([^"]+)"$', open(entry["file"]).read(), re.M):
        own = dict(entry, file=source)
        own["command"] = entry["command"].replace(entry["file"], source)
        entries.append(own)
for entry in entries:
    entry["command"] = re.sub(r"(-Winvalid-pch )?-include \S+/cmake_pch\.hxx ", "",
                              entry["command"])
json.dump(entries, open(sys.argv[2], "w"), indent=0)
