#!/usr/bin/env bash
# Paired before/after comparison of two revisions on the paths a redesign
# touches (BENCHMARKS.md "Machine and method": every repetition runs both
# variants, in an order that alternates, and ratios are taken within it).
#
#   bench/pair.sh BEFORE [AFTER] [REPS]      (AFTER defaults to HEAD, REPS to 5)
#
# Each repetition measures, for both revisions:
#   - `asyncrl run` on the embedded defaults (make run's job), wall time;
#   - `asyncrl sim` scenarios default (200 seeds) and failover (500 seeds), wall time;
#   - the Go benchmarks of the packages on the redesigned paths, present in both
#     revisions (the actor shell, the built-in trainer step, weight sync, the
#     simulator, messages), one -count each.
# Wall times are written as Go benchmark lines (BenchmarkWall/<what> 1 <ns> ns/op),
# so benchstat (golang.org/x/perf, pinned below) summarises everything; the
# paired ratio after/before per repetition and its median are printed too.
# Output: bench/results/pair-<before>-<after>/{before,after}.txt, ratios.txt.
set -euo pipefail

BEFORE=${1:?usage: bench/pair.sh BEFORE [AFTER] [REPS]}
AFTER=${2:-HEAD}
REPS=${3:-5}
BENCHSTAT=golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
PKGS=(./actors ./actors/trainer ./cluster/node ./sim ./messages)

root=$(git rev-parse --show-toplevel)
b=$(git -C "$root" rev-parse --short "$BEFORE")
a=$(git -C "$root" rev-parse --short "$AFTER")
out=$root/bench/results/pair-$b-$a
work=$(mktemp -d /tmp/asyncrl-pair.XXXXXX)
trap 'git -C "$root" worktree remove --force "$work/before" >/dev/null 2>&1 || true;
      git -C "$root" worktree remove --force "$work/after" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
mkdir -p "$out"
: >"$out/before.txt"
: >"$out/after.txt"

prepare() { # prepare NAME REV: a worktree, the binary and the benchmark test binaries
	local name=$1 rev=$2 p
	git -C "$root" worktree add -q --detach "$work/$name" "$rev"
	(cd "$work/$name" && go build -o "$work/$name.bin" ./cmd/asyncrl)
	for p in "${PKGS[@]}"; do
		(cd "$work/$name" && go test -c -o "$work/$name.$(echo "$p" | tr -c 'a-z0-9\n' _).test" "$p")
	done
}

wall() { # wall LABEL FILE CMD...: one BenchmarkWall line (ns) appended to FILE
	local label=$1 file=$2 t0 t1
	shift 2
	t0=$(date +%s%N)
	"$@" >/dev/null 2>&1 || { echo "pair: $label failed: $*" >&2; exit 1; }
	t1=$(date +%s%N)
	echo "BenchmarkWall/$label 1 $((t1 - t0)) ns/op" >>"$file"
}

measure() { # measure NAME REP
	local name=$1 rep=$2 file=$out/$1.txt bin=$work/$1.bin p t d
	d=$work/$name-run-$rep
	mkdir -p "$d"
	(cd "$d" && wall run "$file" "$bin" run --seed "$rep" --log-format json)
	wall sim-default "$file" "$bin" sim --seed "$rep" --seeds 200 --steps 10 --scenario default
	wall sim-failover "$file" "$bin" sim --seed "$rep" --seeds 500 --steps 10 --scenario failover
	for p in "${PKGS[@]}"; do
		t=$work/$name.$(echo "$p" | tr -c 'a-z0-9\n' _).test
		(cd "$work/$name/$p" && "$t" -test.run '^$' -test.bench . -test.benchmem -test.count 1) |
			grep '^Benchmark' >>"$file"
	done
}

echo "pair: building $b and $a" >&2
prepare before "$BEFORE"
prepare after "$AFTER"
for rep in $(seq 1 "$REPS"); do
	echo "pair: repetition $rep of $REPS (load $(cut -d' ' -f1 /proc/loadavg))" >&2
	if ((rep % 2)); then measure before "$rep"; measure after "$rep"; else measure after "$rep"; measure before "$rep"; fi
done

# Paired ratios: the i-th line of a benchmark in after.txt over the i-th in before.txt.
awk '$1 ~ /^Benchmark/ && $4 == "ns/op" { k = $1; n[FILENAME, k]++; v[FILENAME, k, n[FILENAME, k]] = $3; names[k] = 1 }
	END {
		for (k in names) {
			m = 0
			for (i = 1; (ARGV[1], k, i) in v && (ARGV[2], k, i) in v; i++) r[++m] = v[ARGV[2], k, i] / v[ARGV[1], k, i]
			if (m == 0) continue
			for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
			med = (m % 2) ? r[(m + 1) / 2] : (r[m / 2] + r[m / 2 + 1]) / 2
			printf "%-60s after/before median %.3f (min %.3f, max %.3f, %d pairs)\n", k, med, r[1], r[m], m
		}
	}' "$out/before.txt" "$out/after.txt" | sort >"$out/ratios.txt"
{
	echo "# bench/pair.sh $BEFORE $AFTER $REPS ($b → $a), $(date -u +%FT%TZ), load at end $(cut -d' ' -f1-3 /proc/loadavg)"
	cat "$out/ratios.txt"
	echo
	go run "$BENCHSTAT" "$out/before.txt" "$out/after.txt"
} | tee "$out/summary.txt"
