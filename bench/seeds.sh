# Sourced by bench/learn.sh and bench/tool-env.sh: the RL run of an example
# once per seed, all from one warm-up, each in its own data and report
# directory (the example's $ROOT/data and $ROOT/report become
# $ROOT/seed-S/data and $ROOT/seed-S/report); STEPS=N overrides run.steps.
# A failed run prints its log's tail and exits.

run_seeds() { # run_seeds LABEL BIN ROOT RL_CONFIG SEED...
	local label=$1 bin=$2 root=$3 rl=$4 s cfg
	shift 4
	for s in "$@"; do
		cfg=$root/seed-$s.yaml
		sed -e "s#data_dir: $root/data#data_dir: $root/seed-$s/data#" \
			-e "s#report_dir: $root/report#report_dir: $root/seed-$s/report#" "$rl" >"$cfg"
		[ -z "${STEPS:-}" ] || sed -i "s/^  steps: .*/  steps: $STEPS/" "$cfg"
		rm -rf "$root/seed-$s"
		echo "$label seed $s" >&2
		"$bin" run --config "$cfg" --seed "$s" --log-format json >"$root/seed-$s.log" 2>&1 ||
			{ echo "$label: run failed, see $root/seed-$s.log" >&2; tail -5 "$root/seed-$s.log" >&2; exit 1; }
	done
}
