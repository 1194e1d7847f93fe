# Sourced by the trainer's kill tests: what a root may hold after its writers died.
# check_root ROOT CKPT_VERIFY: only committed checkpoints that deep-verify, the
# catalog (with the temporary copy an update killed mid-way leaves), .pending (debris
# for the next recovery) and engines' heartbeats and locks; prints their count.
check_root() {
    local root=$1 verify=$2 n=0 d name
    for d in "$root"/* "$root"/.[!.]*; do
        [ -e "$d" ] || continue
        name=$(basename "$d")
        case $name in
        catalog.mdb|catalog.mdb-lock|.catalog.mdb.tmp|.pending|.ckptd.*) ;;
        step-*) "$verify" --deep "$root" "$name" >/dev/null ||
                    { echo "FAILED: $name is visible but does not verify"; return 1; }
                n=$((n + 1)) ;;
        *) echo "FAILED: unexpected $name in the root"; return 1 ;;
        esac
    done
    [ "$n" -gt 0 ] || { echo "FAILED: no committed checkpoint left in $root"; return 1; }
    echo "$n"
}
