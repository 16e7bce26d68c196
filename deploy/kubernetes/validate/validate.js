#!/usr/bin/env node
// Validates Kubernetes manifests against the Kubernetes API's schemas, offline (no
// cluster): each YAML document is checked as the object its apiVersion and kind name,
// with the models of the kubernetes-models package (types, required fields, formats).
// Fields the schema does not know are not reported (the API server drops them too).
//   node validate.js FILE_OR_FOLDER...   (folders: every .yaml/.yml file in them)
// Prints one line per document; exits 1 if any document is invalid, 2 on bad usage.
"use strict";
const fs = require("fs");
const path = require("path");
const YAML = require("yaml");

// "apps/v1" + "Deployment" -> kubernetes-models/apps/v1/Deployment; core "v1" -> v1/...
function modelFor(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") {
    throw new Error("apiVersion and kind must be strings");
  }
  if (!/^[a-z0-9.]+(\/[a-z0-9]+)?$/.test(apiVersion) || !/^[A-Za-z]+$/.test(kind)) {
    throw new Error(`not an API type: ${apiVersion} ${kind}`);
  }
  let module;
  try {
    module = require(`kubernetes-models/${apiVersion}/${kind}`);
  } catch (error) {
    throw new Error(`unknown apiVersion/kind ${apiVersion} ${kind}`);
  }
  if (typeof module[kind] !== "function") {
    throw new Error(`unknown apiVersion/kind ${apiVersion} ${kind}`);
  }
  return module[kind];
}

function manifestFiles(args) {
  const files = [];
  for (const arg of args) {
    if (fs.statSync(arg).isDirectory()) {
      for (const name of fs.readdirSync(arg).sort()) {
        if (/\.ya?ml$/.test(name)) files.push(path.join(arg, name));
      }
    } else {
      files.push(arg);
    }
  }
  return files;
}

// Returns the problems of one file's documents, as "file:line: message" strings.
function validateFile(file, report) {
  const text = fs.readFileSync(file, "utf8");
  const lineCounter = new YAML.LineCounter();
  const problems = [];
  const documents = YAML.parseAllDocuments(text, { lineCounter });
  for (const document of documents) {
    const line = lineCounter.linePos(document.range[0]).line;
    const where = `${file}:${line}`;
    if (document.errors.length > 0) {
      problems.push(`${where}: YAML: ${document.errors[0].message}`);
      continue;
    }
    const object = document.toJS();
    if (object === null || object === undefined) continue;  // an empty document
    const label = `${object.kind} ${object.metadata && object.metadata.name}`;
    try {
      if (!object.metadata || typeof object.metadata.name !== "string") {
        throw new Error("metadata.name is required");
      }
      const Model = modelFor(object.apiVersion, object.kind);
      new Model(object).validate();
      report(`ok   ${where} ${label}`);
    } catch (error) {
      problems.push(`${where} ${label}: ${error.message}`);
    }
  }
  if (documents.length === 0) problems.push(`${file}: no YAML documents`);
  return problems;
}

function main(args) {
  if (args.length === 0) {
    console.error("usage: validate.js FILE_OR_FOLDER...");
    return 2;
  }
  let files;
  try {
    files = manifestFiles(args);
  } catch (error) {
    console.error(error.message);
    return 2;
  }
  if (files.length === 0) {
    console.error(`no .yaml files in ${args.join(" ")}`);
    return 2;
  }
  let problems = [];
  for (const file of files) {
    problems = problems.concat(validateFile(file, (line) => console.log(line)));
  }
  for (const problem of problems) console.log(`FAIL ${problem}`);
  return problems.length === 0 ? 0 : 1;
}

process.exitCode = main(process.argv.slice(2));
