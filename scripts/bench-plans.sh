#!/usr/bin/env bash
# bench-plans prints the tenant plans figures (docs/plans.md), one
# `plans: NAME=VALUE` line each, from one run on the local PostgreSQL.
#
# Each entry of FIGURES is one `go test` invocation (package, then flags);
# its output is kept in bin/plans.out and filtered to `plans: ` lines. A
# test prints its figure with t.Logf("plans: name=%v", v); a benchmark
# reports a metric, turned into a line by the awk below. Add a figure by
# adding an entry.
set -euo pipefail
GO=${GO:-go}
mkdir -p bin
: >bin/plans.out

# The PostgreSQL job backend's figures (docs/jobs-postgres.md, "Tenant caps,
# weights and priorities") need the local PostgreSQL; PLANS_SECONDS (default
# 10) is each one's measured window, and the continuous benchmark's rounds
# (PGJOBS_BENCH_SECONDS) follow it unless set.
if [[ -n ${PLANS_SECONDS:-} && -z ${PGJOBS_BENCH_SECONDS:-} ]]; then
  export PGJOBS_BENCH_SECONDS=$PLANS_SECONDS
fi
FIGURES=(
  "./internal/admission -run ^$ -bench ^BenchmarkAdmissionPlans$ -benchmem -count 5"
  "./internal/runtime -run ^(TestPlansLiveChange|TestPlansShadowOverride)$ -v -count 1"
  "./internal/jobs/pgjobs -run ^$ -bench ^BenchmarkPlansCapViolations$ -benchtime 1x"
  "./internal/jobs/pgjobs -run ^$ -bench ^BenchmarkPlansFairCapsOverFIFO$ -benchtime 1x"
  "./internal/jobs/pgjobs -run ^$ -bench ^BenchmarkPlansWeightedShare$ -benchtime 1x"
)

for f in "${FIGURES[@]}"; do
  # shellcheck disable=SC2086 # each entry is a list of words on purpose
  "$GO" test $f 2>&1 | tee -a bin/plans.out >/dev/null || { echo "bench-plans: go test $f failed (bin/plans.out)" >&2; exit 1; }
done

# The admission benchmark: the median plans-over-uniform ratio of the runs,
# and the plans engine's largest allocs/op.
awk '
  /^BenchmarkAdmissionPlans/ {
    for (i = 2; i <= NF; i++) {
      if ($i == "plans-over-uniform") r[n++] = $(i-1)
      if ($i == "allocs/op" && $(i-1) > allocs) allocs = $(i-1)
    }
  }
  END {
    if (n == 0) { print "bench-plans: no BenchmarkAdmissionPlans result" > "/dev/stderr"; exit 1 }
    asort(r)
    printf "plans: admission-cost-ratio=%.3f\nplans: admission-allocs-per-op=%d\n", (n % 2 ? r[(n+1)/2] : (r[n/2] + r[n/2+1]) / 2), allocs
  }' bin/plans.out
sed -n 's/.*\(plans: [a-z0-9-]*=[^ ]*\).*/\1/p' bin/plans.out
