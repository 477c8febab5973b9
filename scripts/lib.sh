# Shared by the measuring scripts (sourced, not run): the tools they need and the instructions
# bench's binary they count.

# need TOOL... : exits 2, naming the Debian package, if a tool is missing.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null && continue
    case $tool in
      objdump) echo "objdump is not installed (Debian: apt install binutils)" >&2 ;;
      *) echo "$tool is not installed (Debian: apt install valgrind)" >&2 ;;
    esac
    exit 2
  done
}

# Prints the path of the instructions bench's binary, built if needed; $BIN names another
# build of it (e.g. the main branch's).
instructions_bin() {
  local bin=${BIN:-}
  if [ -z "$bin" ]; then
    local features=()
    [ -z "${FEATURES:-}" ] || features=(--features "$FEATURES")
    cargo bench -q -p spanprof-peers --bench instructions "${features[@]}" --no-run >/dev/null 2>&1
    bin=$(cargo bench -p spanprof-peers --bench instructions "${features[@]}" --no-run 2>&1 \
      | grep -o 'target/[^ )]*instructions-[0-9a-f]*' | head -1)
  fi
  [ -x "$bin" ] || { echo "could not find the instructions bench binary" >&2; exit 1; }
  echo "$bin"
}
