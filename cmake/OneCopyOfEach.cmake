# One copy of each dependency in a build.
#
# A host can hold two copies of a library: its own (Ubuntu's CLI11 in /usr/include) and
# the one CMake was told to use (Debian's, unpacked under /opt/stoke-deps by
# scripts/install-debs.sh). A target that links the imported target gets `-isystem
# /opt/stoke-deps/usr/include`; a target that includes the same header without linking
# it silently gets the host's copy from the compiler's own search path. Two versions of a
# header-only library in one binary break the one-definition rule: the daemons died with
# SIGSEGV before printing their --help on such a host.
#
# stoke_one_copy_of_each(NAME|TARGET|HEADER ...) makes that impossible. For each
# dependency it finds the copy the build chose (the first include directory of TARGET
# that holds HEADER, else the compiler's own directories) and every other copy of HEADER
# a compiler here could reach: the compiler's own directories ($STOKE_HOST_INCLUDE_DIRS,
# by default the implicit ones and /usr/local/include) and the include directories of
# the other dependencies. Then:
#   - the chosen copy lies outside the compiler's own directories: where another copy
#     exists, the chosen one is put before everything on every C++ target's include path,
#     so no file can reach the other;
#   - the chosen copy is the compiler's own but another copy lies on some dependency's
#     include path, or precedes it among the compiler's own: no order of directories
#     gives every file the same copy, and configure fails naming both.
# Copies with the same content (the same file through a link, or the same version
# installed twice) are one copy.

# The compiler's own include directories: searched by every file, after any -I/-isystem.
function(stoke_host_include_dirs out)
  if(DEFINED STOKE_HOST_INCLUDE_DIRS)
    set(${out} ${STOKE_HOST_INCLUDE_DIRS} PARENT_SCOPE)
    return()
  endif()
  set(dirs ${CMAKE_CXX_IMPLICIT_INCLUDE_DIRECTORIES})
  # CMake lists /usr/local/include only where the compiler reports it; GCC searches it.
  if(EXISTS /usr/local/include)
    list(INSERT dirs 0 /usr/local/include)
  endif()
  list(REMOVE_DUPLICATES dirs)
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# The include directories a target declares, generator expressions left out.
function(_stoke_declared_include_dirs target out)
  set(dirs "")
  if(TARGET ${target})
    get_target_property(declared ${target} INTERFACE_INCLUDE_DIRECTORIES)
    if(declared)
      foreach(dir IN LISTS declared)
        if(NOT dir MATCHES "\\$<" AND IS_DIRECTORY "${dir}")
          file(REAL_PATH "${dir}" real)
          list(APPEND dirs "${real}")
        endif()
      endforeach()
    endif()
  endif()
  set(${out} ${dirs} PARENT_SCOPE)
endfunction()

# The first directory of `dirs` holding `header`, or "".
function(_stoke_first_holding header out)
  set(${out} "" PARENT_SCOPE)
  foreach(dir IN LISTS ARGN)
    if(EXISTS "${dir}/${header}")
      set(${out} "${dir}" PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(stoke_one_copy_of_each)
  stoke_host_include_dirs(host_dirs)
  set(host_real "")
  foreach(dir IN LISTS host_dirs)
    if(IS_DIRECTORY "${dir}")
      file(REAL_PATH "${dir}" real)
      list(APPEND host_real "${real}")
    endif()
  endforeach()

  # Every dependency's own include directories, to find copies that other targets reach.
  set(all_declared "")
  foreach(entry IN LISTS ARGN)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 1 target)
    _stoke_declared_include_dirs(${target} declared)
    list(APPEND all_declared ${declared})
  endforeach()
  list(REMOVE_DUPLICATES all_declared)

  set(first_dirs "")
  foreach(entry IN LISTS ARGN)
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 name)
    list(GET fields 1 target)
    list(GET fields 2 header)
    if(NOT TARGET ${target})
      message(FATAL_ERROR "Stoke: ${name}: no CMake target ${target} (find_package first)")
    endif()
    _stoke_declared_include_dirs(${target} declared)
    _stoke_first_holding("${header}" chosen ${declared})
    set(chosen_is_host FALSE)
    if(chosen STREQUAL "" OR chosen IN_LIST host_real)
      # Declared as a compiler directory (CMake drops those from the command line) or
      # not at all: the compiler's first directory holding it is what every file gets.
      _stoke_first_holding("${header}" chosen ${host_real})
      set(chosen_is_host TRUE)
    endif()
    if(chosen STREQUAL "")
      message(FATAL_ERROR "Stoke: ${name}: ${header} is in none of ${target}'s include "
        "directories nor the compiler's own")
    endif()
    file(SHA256 "${chosen}/${header}" chosen_sum)

    set(candidates ${host_real} ${all_declared})
    list(REMOVE_DUPLICATES candidates)
    list(FIND host_real "${chosen}" chosen_host_index)
    foreach(other IN LISTS candidates)
      if(other STREQUAL chosen OR NOT EXISTS "${other}/${header}")
        continue()
      endif()
      file(SHA256 "${other}/${header}" other_sum)
      if(other_sum STREQUAL chosen_sum)
        continue()
      endif()
      list(FIND host_real "${other}" other_host_index)
      if(NOT chosen_is_host)
        # Put first on every path below: the other copy is never reached.
        message(STATUS "Stoke: ${name} from ${chosen}; the copy in ${other} is shadowed "
          "for every target")
        list(APPEND first_dirs "${chosen}")
        continue()
      endif()
      if(other_host_index GREATER_EQUAL 0 AND other_host_index GREATER chosen_host_index)
        continue()  # the compiler reaches the chosen one first, in every file
      endif()
      message(FATAL_ERROR "Stoke: two copies of ${name} would be mixed in one build:\n"
        "  ${chosen}/${header} (the one ${target} uses)\n"
        "  ${other}/${header} (on the include path of other dependencies, or searched "
        "first by the compiler)\n"
        "Files that include ${header} would get either, depending on what their target "
        "links. Take every dependency from one place: on a host with carried packages, "
        "`source .gpu-deps/setup.sh` (CMAKE_PREFIX_PATH then names the carried prefix "
        "first) and configure a fresh build folder; or remove one of the two copies.")
    endforeach()
  endforeach()

  list(REMOVE_DUPLICATES first_dirs)
  if(first_dirs)
    # C++ only: nvcc takes its own headers, and Stoke's .cu files include none of these.
    foreach(dir IN LISTS first_dirs)
      include_directories(BEFORE SYSTEM "$<$<COMPILE_LANGUAGE:CXX>:${dir}>")
    endforeach()
    message(STATUS "Stoke: first on every C++ include path: ${first_dirs}")
  endif()
endfunction()
