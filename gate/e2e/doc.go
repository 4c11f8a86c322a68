// Package e2e holds the end-to-end browser tests of anteroom: a real sidecar
// (an SQLite file, the cron update, the websocket hub and the demo page on a
// loopback port) driven by headless Chromium through chromedp. It has no
// code besides the tests.
//
// The tests skip when no Chromium is installed, and fail instead when the
// environment variable CI is set. ANTEROOM_UPDATE_SCREENSHOT=1 makes them
// rewrite docs/waiting-overlay.png, the screenshot the README shows.
package e2e
