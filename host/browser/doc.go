// Package browser holds the status page's test in a real browser: the host
// of package host on an embedded Kafka, its page loaded in headless
// Chromium driven by chromedp. It is a module of its own so that the host's
// users do not pull chromedp. The test skips when no Chromium is found;
// scripts/test.sh installs Debian's chromium where it is missing.
package browser
