#!/bin/bash
# The command line behaves like its neighbours: --version, help for every command (three ways,
# the same text), errors that list the real commands, --print-config that parses back to the
# same config, and the documented exit codes (0 done, 1 the run failed, 2 usage/config error).
#   commands.sh DTRAIN SRC_DIR VERSION
set -uo pipefail
dtrain=$1 src=$2 version=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed + 1)); }
bad() { echo "FAIL $1"; failed=$((failed + 1)); }
check() { # NAME EXPECTED_RC ARGS... : runs dtrain, out.txt/err.txt/rc left for further checks
    local name=$1 want=$2
    shift 2
    "$dtrain" "$@" > out.txt 2> err.txt
    rc=$?
    if [ "$rc" -eq "$want" ]; then ok "$name (rc $rc)"; else bad "$name: rc $rc, want $want"; cat err.txt; fi
}

check "--version" 0 --version
[ "$(cat out.txt)" = "dtrain $version" ] && ok "--version says $version" || bad "--version: $(cat out.txt)"

check "--help" 0 --help
# the commands the overview lists are the ones the dispatcher knows
commands=$(sed -n '/^commands:/,/^$/p' out.txt | awk 'NF && !/^commands:/ {print $1}')
[ "$(echo "$commands" | wc -l)" -eq 8 ] && ok "overview lists 8 commands" || bad "overview: $commands"
for c in $commands; do
    check "help $c" 0 help "$c"
    head -1 out.txt | grep -q "^usage: dtrain $c" && ok "help $c is its usage" || bad "help $c: $(head -1 out.txt)"
    cp out.txt want.txt
    for flag in --help -h; do
        check "$c $flag" 0 "$c" $flag
        cmp -s out.txt want.txt && ok "$c $flag = help $c" || bad "$c $flag differs from help $c"
    done
    check "$c --bogus" 2 "$c" --bogus-option
done

# every error naming the commands names all of them
for args in "frobnicate" "help frobnicate"; do
    check "$args" 2 $args
    for c in $commands; do
        grep -q "commands:.*\b$c\b" err.txt || bad "'$args' error does not list $c: $(cat err.txt)"
    done
    [ "$(wc -l < err.txt)" -eq 1 ] && ok "'$args' is one line" || bad "'$args': $(cat err.txt)"
done
check "no command" 2

# --print-config: file + overrides, in the config format, parses back to the same config
tiny=(--config "$src/configs/tiny-llama.ini")
check "print-config" 0 train "${tiny[@]}" --train.steps=7 --optim.lr=0.00125 --plugin.tp_size=2 \
    --print-config --data.train=x/train.bin
cp out.txt p1.ini
grep -qE '^steps *= *7$' p1.ini && grep -qE '^tp_size *= *2$' p1.ini &&
    grep -qE '^train *= *"x/train.bin"$' p1.ini && grep -qE '^arch *= *llama$' p1.ini &&
    ok "print-config has the file's and the overrides' values" || bad "print-config values: $(cat p1.ini)"
check "print-config of the printed config" 0 train --config p1.ini --print-config
cmp -s out.txt p1.ini && ok "printed config parses back to itself" || { bad "round trip"; diff p1.ini out.txt; }
# the printed file differs from the defaults where the overrides said so, and nowhere else
check "print-config defaults" 0 train --print-config
cp out.txt p0.ini
check "print-config defaults + overrides" 0 train --print-config --train.steps=7
[ "$(diff p0.ini out.txt | grep -c '^[<>]')" -eq 2 ] && ok "one override changes one line" ||
    { bad "one override"; diff p0.ini out.txt; }
check "print-config of an invalid config" 2 train --print-config --model.n_head=5

# exit codes
mkdir cfgdir
check "config path is a directory" 2 train --config cfgdir
grep -q "error: config file 'cfgdir' is a directory" err.txt && [ "$(wc -l < err.txt)" -eq 1 ] &&
    ok "directory: one clear line" || bad "directory: $(cat err.txt)"
check "missing config file" 2 train --config nothere.ini
check "unknown key" 2 train --model.n_layers=3
check "stray argument" 2 train steps=3
check "run fails: missing data" 1 train "${tiny[@]}" --data.train=nothere.bin
check "prepare: missing input" 1 prepare --input nothere.txt --out data
check "prepare: no --out" 2 prepare --input nothere.txt

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
