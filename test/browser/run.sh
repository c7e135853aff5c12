#!/bin/bash
# test/browser/run.sh -- the speedscope export loads in the real speedscope
# (npm package, offline build) in headless Chromium, and the perfetto
# export is well-formed trace-event JSON.
#
# Run from the repo root: `bash test/browser/run.sh`.  It
#   1. finds Debian's chromium and speedscope under _build/npm; as root it
#      installs what is missing (apt-get install chromium; npm install
#      --prefix _build/npm speedscope@$SPEEDSCOPE_VERSION) unless
#      BEAMPROBE_NO_INSTALL=1.  When they cannot be had it prints
#      "SKIP: <reason>" lines and "0 passed, 0 failed, 1 skipped", exit 0;
#   2. builds (make), traces test/browser/bp_browser_work.erl with the
#      real tracer and exports the trace for speedscope and perfetto;
#   3. opens speedscope's dist/release/index.html#localProfilePath=<js>
#      in headless Chromium the way speedscope's own CLI (bin/cli.mjs)
#      does, screenshots it to _build/browser/speedscope.png and
#      _build/browser/speedscope-left-heavy.png and checks that the
#      pictures show a flame chart (test/browser/png_check.mjs, also run
#      on speedscope's landing page, which it must reject), and that the
#      DOM of the sandwich view lists the traced functions;
#   4. checks the perfetto JSON with test/browser/perfetto_check.py.
# Prints TAP-ish "ok N - ..." lines, ends with "N passed, M failed" (and
# ", K skipped" when some were skipped) and exits non-zero on failure.
#
# Environment: CHROMIUM (the browser, default: chromium on PATH),
# SPEEDSCOPE_VERSION (default 1.25.0), BEAMPROBE_NO_INSTALL=1.
set -u
export LC_ALL=C TZ=UTC

cd "$(dirname "$0")/../.." || exit 1
T0=$(date +%s)
HERE=test/browser
NPM_PREFIX=_build/npm
SPEEDSCOPE_VERSION=${SPEEDSCOPE_VERSION:-1.25.0}
SS_DIR=$NPM_PREFIX/node_modules/speedscope
OUT=_build/browser
pass=0 fail=0 skip=0 n=0
ok() { n=$((n + 1)); pass=$((pass + 1)); echo "ok $n - $1"; }
not_ok() { n=$((n + 1)); fail=$((fail + 1)); echo "not ok $n - $1"; [ -n "${2:-}" ] && sed 's/^/#   /' <<<"$2" | head -30; }
skip_one() { n=$((n + 1)); skip=$((skip + 1)); echo "ok $n - SKIP $1"; }
finish() {
	echo "# $(($(date +%s) - T0)) s"
	if [ $skip -gt 0 ]; then echo "$pass passed, $fail failed, $skip skipped"; else echo "$pass passed, $fail failed"; fi
	[ $fail -eq 0 ]
	exit
}
have() { command -v "$1" >/dev/null 2>&1; }
can_install() { [ "$(id -u)" = 0 ] && [ "${BEAMPROBE_NO_INSTALL:-0}" != 1 ]; }

WORK=$(mktemp -d /tmp/bp-browser-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

# --- 1. tools --------------------------------------------------------------
reasons=()
installed=""
apt_install() { # apt_install PKG...: as root, without asking
	can_install && have apt-get || return 1
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -qq "$@" >>"$WORK/install.log" 2>&1 ||
		{ apt-get update -qq >>"$WORK/install.log" 2>&1 &&
			apt-get install -y -qq "$@" >>"$WORK/install.log" 2>&1; }
}
find_chromium() {
	if [ -n "${CHROMIUM:-}" ]; then have "$CHROMIUM" && CHROMIUM=$(command -v "$CHROMIUM"); return; fi
	CHROMIUM=$(command -v chromium 2>/dev/null || true)
}

CHROMIUM_SET=${CHROMIUM:-}
find_chromium
if [ -z "$CHROMIUM" ] || ! have "$CHROMIUM"; then
	t=$(date +%s)
	if [ -z "${CHROMIUM:-}" ] && apt_install chromium; then
		find_chromium
		installed+=" chromium ($(($(date +%s) - t)) s)"
	fi
	if [ -z "$CHROMIUM" ] || ! have "$CHROMIUM"; then
		if [ -n "${CHROMIUM_SET:-}" ]; then
			reasons+=("CHROMIUM=$CHROMIUM_SET is not a command")
		elif can_install; then
			reasons+=("chromium not found and 'apt-get install -y chromium' failed: $(tail -1 "$WORK/install.log" 2>/dev/null)")
		else
			reasons+=("chromium not found (install it as root: apt-get install -y chromium, or make deps)")
		fi
	fi
fi
if ! have node || ! have npm; then
	t=$(date +%s)
	apt_install nodejs npm && installed+=" nodejs npm ($(($(date +%s) - t)) s)"
	have node && have npm ||
		reasons+=("node/npm not found (as root: apt-get install -y nodejs npm)")
fi
if have node && [ ! -f "$SS_DIR/dist/release/index.html" ]; then
	if can_install && have npm; then
		t=$(date +%s)
		mkdir -p "$NPM_PREFIX"
		# The pinned version; if the registry lacks it, the latest.
		{ timeout 600 npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --no-save "speedscope@$SPEEDSCOPE_VERSION" ||
			timeout 600 npm install --prefix "$NPM_PREFIX" --no-audit --no-fund --no-save speedscope; } >>"$WORK/install.log" 2>&1
		[ -f "$SS_DIR/dist/release/index.html" ] && installed+=" speedscope ($(($(date +%s) - t)) s)"
	fi
	if [ ! -f "$SS_DIR/dist/release/index.html" ]; then
		if can_install && have npm; then
			reasons+=("speedscope not in $NPM_PREFIX and 'npm install --prefix $NPM_PREFIX speedscope@$SPEEDSCOPE_VERSION' failed: $(grep -iE '^npm err(or|!) (code|FetchError|404)' "$WORK/install.log" 2>/dev/null | head -2 | tr '\n' ' ')")
		else
			reasons+=("speedscope not in $NPM_PREFIX (install it as root: npm install --prefix $NPM_PREFIX speedscope@$SPEEDSCOPE_VERSION, or make deps)")
		fi
	fi
fi
if [ ${#reasons[@]} -gt 0 ]; then
	for r in "${reasons[@]}"; do echo "SKIP: $r"; done
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi
SS_VERSION=$(node -p "require('./$SS_DIR/package.json').version" 2>/dev/null)
CHROMIUM_VERSION=$("$CHROMIUM" --version 2>/dev/null | head -1)
ok "tools: ${CHROMIUM_VERSION:-$CHROMIUM}, speedscope $SS_VERSION, node $(node --version)${installed:+; installed now:$installed}"

# --- 2. build, trace, export -----------------------------------------------
if make -s >"$WORK/build.log" 2>&1; then
	ok "build (make)"
else
	not_ok "build (make)" "$(tail -20 "$WORK/build.log")"
	finish
fi

TRACE=$WORK/trace
if ! erlc +warnings_as_errors -o "$WORK" $HERE/bp_browser_work.erl >"$WORK/erl.log" 2>&1; then
	not_ok "compile $HERE/bp_browser_work.erl" "$(cat "$WORK/erl.log")"
	finish
fi
# A new process runs compiled code (an -eval fun would run in erl_eval,
# which calls lists functions of its own), the session stops after it ends.
timeout 60 erl -noshell -pa ebin -pa "$WORK" -eval '
    Dir = hd(init:get_plain_arguments()),
    {ok, S} = beamprobe:start(#{calls => [{lists, seq, 2}, {lists, reverse, 1},
                                          {bp_browser_work, run, 1},
                                          {bp_browser_work, nest, 1}],
                                %% return: a time profile needs the calls to end
                                procs => new, return => true,
                                output => {file, Dir}}),
    {P, R} = spawn_monitor(bp_browser_work, run, [8]),
    receive {'"'"'DOWN'"'"', R, process, P, normal} -> ok end,
    {ok, #{events := E}} = beamprobe:stop(S),
    io:format("events=~w~n", [E]),
    halt().' -extra "$TRACE" >"$WORK/erl.log" 2>&1
rc=$?
events=$(sed -n 's/^events=//p' "$WORK/erl.log")
if [ $rc -eq 0 ] && [ "${events:-0}" -gt 0 ]; then
	ok "trace bp_browser_work:run(8) with beamprobe:start/1 ($events events)"
else
	not_ok "trace bp_browser_work:run(8) with beamprobe:start/1 (exit $rc)" "$(tail -20 "$WORK/erl.log")"
	finish
fi

PROFILE=$WORK/beamprobe.speedscope.json
PERFETTO=$WORK/beamprobe.perfetto.json
if bin/beamprobe export --format speedscope "$TRACE" -o "$PROFILE" 2>"$WORK/err" &&
	bin/beamprobe export --format perfetto "$TRACE" -o "$PERFETTO" 2>>"$WORK/err"; then
	ok "export --format speedscope and --format perfetto ($(wc -c <"$PROFILE") and $(wc -c <"$PERFETTO") bytes)"
else
	not_ok "export --format speedscope and --format perfetto" "$(cat "$WORK/err")"
	finish
fi

# --- 3. speedscope in headless Chromium ------------------------------------
# As speedscope's bin/cli.mjs: the profile, base64, in a script that calls
# speedscope.loadFileFromBase64(), named by #localProfilePath=.  Plus: a
# file speedscope cannot read makes it call alert(), which would hang
# headless Chromium until the timeout, so alert() writes into the page.
JS=$WORK/profile.js
node -e '
const fs = require("fs"), path = require("path");
const [src, dst] = process.argv.slice(1);
fs.writeFileSync(dst,
  `window.alert = m => { const e = document.createElement("pre"); ` +
  `e.textContent = "ALERT: " + m; document.body.appendChild(e) };\n` +
  `speedscope.loadFileFromBase64(${JSON.stringify(path.basename(src))}, ` +
  `${JSON.stringify(fs.readFileSync(src).toString("base64"))})`);' "$PROFILE" "$JS"
INDEX="file://$PWD/$SS_DIR/dist/release/index.html"
URL="$INDEX#localProfilePath=$JS"

# chrome LOG ARGS...: one headless run with a fresh profile directory.
# speedscope draws with WebGL: without a GPU that is SwiftShader, which
# Chromium only uses unasked up to some version (--enable-unsafe-swiftshader).
chrome() {
	local log=$1 udd
	shift
	udd=$(mktemp -d "$WORK/chrome-profile.XXXXXX")
	# Exits 124 on timeout, e.g. when a dialog blocks the page.
	timeout -k 5 30 "$CHROMIUM" --headless --no-sandbox --disable-gpu --disable-quic \
		--no-first-run --disable-background-networking --disable-component-update \
		--disable-sync --enable-unsafe-swiftshader --user-data-dir="$udd" --window-size=1280,800 \
		--virtual-time-budget=5000 "$@" 2>"$log"
}
# The last lines of a chromium log, without the noise of a machine with
# no D-Bus and no GPU.
chrome_log() { grep -vE 'dbus/|GL Driver Message|gles2_cmd_decoder|unexpected operator' "$1" | tail -5; }
# shot NAME URL PNG: screenshot and check it shows a flame chart.
shot() {
	local name=$1 url=$2 png=$3 msg
	rm -f "$png"
	chrome "$WORK/chrome-$name.log" --screenshot="$png" "$url" >/dev/null
	crc=$?
	if [ ! -s "$png" ]; then
		not_ok "speedscope $name view: screenshot" "no $png (chromium exit $crc$([ $crc = 124 ] && echo ', timed out')); $(chrome_log "$WORK/chrome-$name.log")"
	elif msg=$(node $HERE/png_check.mjs "$png"); then
		ok "speedscope $name view renders a flame chart: $msg"
	else
		not_ok "speedscope $name view renders a flame chart" "$msg"
	fi
}

mkdir -p "$OUT"
shot time-order "$URL" "$OUT/speedscope.png"
shot left-heavy "$URL&view=left-heavy" "$OUT/speedscope-left-heavy.png"
echo "# screenshots: $PWD/$OUT/speedscope.png $PWD/$OUT/speedscope-left-heavy.png"

# Control: the same check must reject speedscope without a profile.
chrome "$WORK/chrome-landing.log" --screenshot="$WORK/landing.png" "$INDEX" >/dev/null
msg=$(node $HERE/png_check.mjs "$WORK/landing.png")
case $? in
1) ok "control: the PNG check rejects speedscope's landing page (${msg##*; })" ;;
0) not_ok "control: the PNG check rejects speedscope's landing page" "accepted: $msg" ;;
*) not_ok "control: screenshot of speedscope's landing page" "$msg; $(chrome_log "$WORK/chrome-landing.log")" ;;
esac

# The flame chart is a canvas; the sandwich view's table is DOM, so its
# text shows what speedscope parsed.
DOM=$WORK/sandwich.html
chrome "$WORK/chrome-dom.log" --dump-dom "$URL&view=sandwich" >"$DOM"
crc=$?
missing=""
for f in 'lists:seq/2' 'lists:reverse/1' 'bp_browser_work:nest/1' 'bp_browser_work:run/1' \
	"<title>$TRACE - speedscope</title>"; do
	grep -qF -- "$f" "$DOM" || missing+=" '$f'"
done
bad=$(grep -oE 'ALERT: [^<]*|Something went wrong|Drag and drop a profile' "$DOM" | head -3)
if [ $crc = 0 ] && [ -z "$missing" ] && [ -z "$bad" ]; then
	ok "speedscope parsed the profile: its sandwich view lists lists:seq/2, lists:reverse/1, bp_browser_work:nest/1, run/1"
else
	not_ok "speedscope parsed the profile (sandwich view DOM)" \
		"chromium exit $crc; ${missing:+missing:$missing}${bad:+; error text: $bad}; $(wc -c <"$DOM") bytes of DOM
$(chrome_log "$WORK/chrome-dom.log")"
fi

# --- 4. perfetto JSON --------------------------------------------------------
if have python3; then
	if msg=$(python3 $HERE/perfetto_check.py "$PERFETTO" lists:seq/2 lists:reverse/1 bp_browser_work:nest/1 \
		--inside bp_browser_work:nest/1 lists:seq/2); then
		ok "perfetto export: balanced slices, lists:seq/2 inside bp_browser_work:nest/1 (${msg#*: })"
	else
		not_ok "perfetto export is well-formed" "$msg"
	fi
else
	skip_one "perfetto export check: python3 not found"
fi

finish
