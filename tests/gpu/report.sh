# Sourced by the real-GPU check scripts: the result table they print last, and its log.
#   report_init LOGFILE     empties LOGFILE; ROWS=() and FAILED=0
#   row CHECK RESULT DETAIL one table row (RESULT: PASS | FAIL | INFO); FAIL sets FAILED=1
#   report_print            the table rows
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
