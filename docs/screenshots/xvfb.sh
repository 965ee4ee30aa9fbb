# Shared by the take-*.sh screenshot scripts (source it from the repository root): the window binary
# ($TESSERA, default build/ui/tessera), the output folder, a scratch folder removed on exit, and
#   xvfb_start DISPLAY WxH   an Xvfb server of that size in the background (DISPLAY like :97)
#   xvfb_stop                stops it
bin=${TESSERA:-build/ui/tessera}
out=docs/screenshots
work=$(mktemp -d)
xvfb=""
cleanup() {
    [ -n "$xvfb" ] && kill "$xvfb" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
xvfb_start() {
    Xvfb "$1" -screen 0 "${2}x24" -nolisten tcp >/dev/null 2>&1 &
    xvfb=$!
    sleep 1
}
xvfb_stop() {
    kill "$xvfb"
    wait "$xvfb" 2>/dev/null || true
    xvfb=""
}
