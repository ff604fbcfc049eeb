# Sourced by the real-GPU check scripts: the result table they print last, and its log.
#   report_init LOGFILE     empties LOGFILE; ROWS=() and FAILED=0
#   row CHECK RESULT DETAIL one table row (RESULT: PASS | FAIL | INFO); FAIL sets FAILED=1
#   report_print            the table rows
#   field LINE KEY          the value of KEY=value in a result line
#   mib BYTES               BYTES in MiB, rounded
#   le A B                  whether A <= B, as numbers (false when either is empty)
report_init() {
  LOG="$1"
  : >"$LOG"
  ROWS=()
  FAILED=0
}
row() {  # row <check> <PASS|FAIL|INFO> <detail>
  ROWS+=("| $1 | $2 | $3 |")
  [ "$2" = FAIL ] && FAILED=1
  echo "== $1: $2 $3" | tee -a "$LOG"
}
report_print() { printf '%s\n' "${ROWS[@]}"; }
field() { printf '%s\n' "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1; }
mib() { awk -v b="${1:-0}" 'BEGIN { printf "%.0f", b / 1048576 }'; }
le() { [ -n "${1:-}" ] && [ -n "${2:-}" ] && awk -v a="$1" -v b="$2" 'BEGIN { exit !(a + 0 <= b + 0) }'; }
