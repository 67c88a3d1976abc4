# Sourced by the benchmark scripts: median NUMBER... prints the median of
# the numbers (the lower one of the middle two for an even count), nothing
# for none.
median() {
    printf '%s\n' "$@" | grep . | sort -g | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'
}
