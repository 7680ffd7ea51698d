# Writes OUT, a header defining MXMOE_GIT_COMMIT as `git describe` of SRC, when its text changes: run at
# every build (the mxmoe_git_commit target), so that a benchmark record names the commit the binary was
# built from, not the one of the last configure.
execute_process(COMMAND git -C "${SRC}" describe --always --dirty --abbrev=12
                OUTPUT_VARIABLE commit OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT commit)
  set(commit "unknown")
endif()
set(text "#define MXMOE_GIT_COMMIT \"${commit}\"\n")
set(old "")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()
