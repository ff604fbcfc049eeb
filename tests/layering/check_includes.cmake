# Layering check: the library (src/interpose) and the CLI (src/cli) must not depend on the node
# daemon (src/node) or the Kubernetes device plugin (src/k8s). They share the registration
# protocol through src/protocol, which sits below all of them.
#
#   cmake -DROOT=<repository root> -P check_includes.cmake
#       Fails (exit 1, one line per offending include with the chain that reaches it) when a file
#       under ROOT/src/interpose or ROOT/src/cli includes, directly or through other headers of
#       ROOT/src, a file of ROOT/src/node or ROOT/src/k8s.
#   cmake -DSELFTEST=<scratch directory> -P check_includes.cmake
#       Proves that the check can fail: writes small trees into the scratch directory, one per
#       include form (quotes, angle brackets, "../node/", "src/k8s/", a header that is not there,
#       "# include" with spaces, #include_next, through another header), runs the check on each
#       and fails unless every one of them is refused and a clean tree passes.
#
# An include is resolved as the compiler would for this project: relative to the including
# file's directory, then to ROOT/src (the include directory of every target), then to ROOT. It
# is refused when it resolves into a forbidden directory, or, whether or not the file exists (a
# generated header such as k8s/deviceplugin.pb.h lives in the build tree), when its normalised
# text names one ("node/...", "k8s/...", ".../src/node/...").
# Needs only CMake: the library and the CLI build without anything else.
cmake_minimum_required(VERSION 3.20)

set(checked_dirs interpose cli)
set(forbidden_dirs node k8s)

# check_tree(<root> <result variable>): sets the variable to the list of violations (empty = ok).
function(check_tree root out_var)
  get_filename_component(root "${root}" ABSOLUTE)
  set(src "${root}/src")
  set(violations "")
  set(queue "")
  foreach(dir IN LISTS checked_dirs)
    if(IS_DIRECTORY "${src}/${dir}")
      file(GLOB_RECURSE files LIST_DIRECTORIES false "${src}/${dir}/*")
      list(SORT files)
      list(APPEND queue ${files})
    endif()
  endforeach()
  # Breadth-first over the include graph inside ROOT/src; via_<md5> remembers who included what.
  set(seen ${queue})
  while(queue)
    list(POP_FRONT queue file)
    string(MD5 key "${file}")
    set(chain "${via_${key}}")
    if(chain STREQUAL "")
      file(RELATIVE_PATH chain "${root}" "${file}")
    endif()
    file(STRINGS "${file}" lines REGEX "^[ \t]*#[ \t]*include(_next)?[ \t]*[<\"][^>\"]+[>\"]")
    get_filename_component(file_dir "${file}" DIRECTORY)
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include(_next)?[ \t]*[<\"]([^>\"]+)[>\"].*$" "\\2" name "${line}")
      cmake_path(SET text NORMALIZE "${name}")
      set(bad FALSE)
      foreach(dir IN LISTS forbidden_dirs)
        if(text MATCHES "^(\\.\\./)*${dir}/" OR text MATCHES "(^|/)src/${dir}/")
          set(bad TRUE)
        endif()
      endforeach()
      set(resolved "")
      foreach(base IN ITEMS "${file_dir}" "${src}" "${root}")
        cmake_path(ABSOLUTE_PATH name BASE_DIRECTORY "${base}" NORMALIZE OUTPUT_VARIABLE candidate)
        if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
          set(resolved "${candidate}")
          break()
        endif()
      endforeach()
      if(resolved)
        foreach(dir IN LISTS forbidden_dirs)
          set(forbidden "${src}/${dir}")
          cmake_path(IS_PREFIX forbidden "${resolved}" NORMALIZE inside)
          if(inside)
            set(bad TRUE)
          endif()
        endforeach()
      endif()
      if(bad)
        list(APPEND violations "${chain} includes \"${name}\"")
      elseif(resolved)
        cmake_path(IS_PREFIX src "${resolved}" NORMALIZE in_src)
        if(in_src AND NOT resolved IN_LIST seen)
          list(APPEND seen "${resolved}")
          list(APPEND queue "${resolved}")
          file(RELATIVE_PATH rel "${root}" "${resolved}")
          string(MD5 rkey "${resolved}")
          set(via_${rkey} "${chain} -> ${rel}")
        endif()
      endif()
    endforeach()
  endwhile()
  set(${out_var} "${violations}" PARENT_SCOPE)
endfunction()

# --- self-test: every include form must be caught -------------------------------------------
function(write_case dir file text)
  file(WRITE "${dir}/${file}" "${text}\n")
endfunction()

if(DEFINED SELFTEST)
  file(REMOVE_RECURSE "${SELFTEST}")
  set(failures "")
  # <case name> <file under src/ that includes> <include line>
  set(cases
    "quoted|interpose/a.cc|#include \"node/wire.h\""
    "angle|cli/a.cc|#include <k8s/status.h>"
    "relative|cli/a.h|#include \"../node/daemon.h\""
    "src_prefix|interpose/a.cc|#include \"src/k8s/k8s_plugin.h\""
    "generated|cli/a.cc|#include \"k8s/deviceplugin.pb.h\""
    "spaces|interpose/a.cc|  #  include   \"node/daemon.h\""
    "include_next|cli/a.cc|#include_next <node/daemon.h>"
    "def_file|interpose/hooks.def|#include \"node/daemon.h\""
    "transitive|cli/a.cc|#include \"common/helper.h\"")
  foreach(case IN LISTS cases)
    string(REPLACE "|" ";" parts "${case}")
    list(GET parts 0 name)
    list(GET parts 1 file)
    list(GET parts 2 line)
    set(tree "${SELFTEST}/${name}")
    file(MAKE_DIRECTORY "${tree}/src/interpose" "${tree}/src/cli" "${tree}/src/common" "${tree}/src/node"
         "${tree}/src/k8s")
    write_case("${tree}/src" "node/wire.h" "// codec")
    write_case("${tree}/src" "node/daemon.h" "// daemon")
    write_case("${tree}/src" "k8s/status.h" "// status")
    write_case("${tree}/src" "k8s/k8s_plugin.h" "// plugin")
    write_case("${tree}/src" "common/helper.h" "#include \"node/daemon.h\"")
    write_case("${tree}/src" "${file}" "${line}")
    check_tree("${tree}" found)
    if(NOT found)
      list(APPEND failures "${name}: '${line}' in src/${file} was not caught")
    else()
      message(STATUS "caught (${name}): ${found}")
    endif()
  endforeach()
  # A clean tree passes: the library includes the protocol, a comment mentions node/.
  set(tree "${SELFTEST}/clean")
  file(MAKE_DIRECTORY "${tree}/src/protocol" "${tree}/src/node")
  write_case("${tree}/src" "protocol/wire.h" "#include <string>")
  write_case("${tree}/src" "node/daemon.h" "#include \"protocol/wire.h\"")
  write_case("${tree}/src" "interpose/a.cc" "#include \"protocol/wire.h\"\n// node/daemon.h is not included")
  write_case("${tree}/src" "cli/a.cc" "#include <sys/types.h>\n#include \"protocol/wire.h\"")
  check_tree("${tree}" found)
  if(found)
    list(APPEND failures "clean tree refused: ${found}")
  endif()
  if(failures)
    list(JOIN failures "\n  " text)
    message(FATAL_ERROR "layering check self-test failed:\n  ${text}")
  endif()
  message(STATUS "layering check self-test: every include form refused, the clean tree passes")
  return()
endif()

# --- the check --------------------------------------------------------------------------------
if(NOT DEFINED ROOT)
  message(FATAL_ERROR "usage: cmake -DROOT=<repository root> -P check_includes.cmake "
                      "(or -DSELFTEST=<scratch directory>)")
endif()
if(NOT IS_DIRECTORY "${ROOT}/src/interpose" OR NOT IS_DIRECTORY "${ROOT}/src/cli")
  message(FATAL_ERROR "ROOT=${ROOT}: no src/interpose and src/cli there")
endif()
check_tree("${ROOT}" found)
if(found)
  list(JOIN found "\n  " text)
  message(FATAL_ERROR "src/interpose and src/cli must not include src/node or src/k8s "
                      "(shared code goes below both, e.g. src/protocol):\n  ${text}")
endif()
message(STATUS "layering: src/interpose and src/cli include nothing from src/node or src/k8s")
