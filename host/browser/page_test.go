package browser_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz/franzhost"
	"github.com/redeliver-go/redeliver/adapters/kafkago/kafkagohost"
	"github.com/redeliver-go/redeliver/host"
	"github.com/redeliver-go/redeliver/hostconfig"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
	"github.com/redeliver-go/redeliver/stream"
)

// wait bounds every wait of the test.
const wait = 30 * time.Second

// pageToken is the host's token, which the operator types to sign in.
const pageToken = "status-page-token-0123"

// chromium returns the browser to run: $REDELIVER_CHROMIUM, else the first
// of Debian's and Chrome's names on the PATH.
func chromium() string {
	if p := os.Getenv("REDELIVER_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

const hostJSON = `{
  "checkpointRetryPolicy": {
    "retryCount": 5,
    "strategy": {"name": "exponential", "initialDelay": "00:01:00"},
    "functions": {
      "payments": {"retryCount": 2, "sleepDuration": "00:00:00.050", "onExhausted": "stop"},
      "refunds": {"retryCount": 1, "sleepDuration": "00:00:00.020", "onExhausted": "park"},
      "audit": {"retryCount": 3, "sleepDuration": "00:00:00.050"},
    },
  },
  "outageBudget": {"maxTokens": 2, "probeDelay": "00:01:00", "maxProbeDelay": "00:01:00"},
  "redrive": {"expiry": "00:15:00"},
  "triggers": {
    "orders": {"type": "kafka", "topic": "orders", "consumerGroup": "orders-app", "maxBatchSize": 1},
    "payments": {"type": "kafka", "adapter": "kafkago", "topic": "payments", "consumerGroup": "payments-app", "maxBatchSize": 1},
    "refunds": {"type": "kafka", "topic": "refunds", "consumerGroup": "refunds-app", "maxBatchSize": 1},
    "audit": {"type": "kafka", "topic": "audit", "consumerGroup": "audit-app", "maxBatchSize": 1},
  },
}`

// startHost runs four functions on kfake: orders, whose partition 1 fails
// at offset 3 and waits out a one-minute backoff; payments, which stops at
// offset 7 until fixed is set; refunds, which parks its offsets 2 and 4
// in an SQLite re-drive store; and audit, whose downstream is down on both
// its partitions: an outage (the outage budget of 2 tokens runs out at the
// second failure), probed after a minute. It returns the page's address.
func startHost(t *testing.T, fixed *atomic.Bool) string {
	t.Helper()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "orders", "audit"), kfake.SeedTopics(1, "payments", "refunds"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	produce(t, brokers)

	cfg, err := hostconfig.Loader{Environ: func() []string { return nil }}.Parse("host.json", []byte(hostJSON))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	store := redrivetest.NewMemStore()
	franz, err := franzhost.New()
	if err != nil {
		t.Fatal(err)
	}
	kafkago, err := kafkagohost.New(kafkagohost.WithGroupConfig(func(gc *kafka.ConsumerGroupConfig) {
		gc.HeartbeatInterval, gc.SessionTimeout, gc.RebalanceTimeout = 100*time.Millisecond, time.Second, 2*time.Second
		gc.JoinGroupBackoff = 100 * time.Millisecond
	}))
	if err != nil {
		t.Fatal(err)
	}
	h, err := host.New(cfg, host.WithAdapter(franz), host.WithAdapter(kafkago), host.WithBrokers(brokers...), host.WithListener(ln),
		host.WithToken(pageToken), host.WithRedrive(store), host.WithRefresh(700*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	must(t, h.Register("orders", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.Partition == 1 && b.FirstOffset() == 3 {
			return errors.New("inventory service timed out")
		}
		return nil
	})))
	must(t, h.Register("payments", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if b.FirstOffset() == 7 && !fixed.Load() {
			return errors.New("payment 7: card processor rejects currency XTS")
		}
		return nil
	})))
	must(t, h.Register("refunds", stream.HandlerFunc(func(_ context.Context, b *stream.Batch) error {
		if o := b.FirstOffset(); o == 2 || o == 4 {
			return fmt.Errorf("refund %d: order not found in the ledger", o)
		}
		return nil
	})))
	must(t, h.Register("audit", stream.HandlerFunc(func(context.Context, *stream.Batch) error {
		return errors.New("ledger service unavailable")
	})))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(wait):
			t.Error("host did not stop")
		}
	})
	return "http://" + ln.Addr().String() + "/"
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func produce(t *testing.T, brokers []string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	must(t, err)
	defer cl.Close()
	var recs []*kgo.Record
	for i := range 10 {
		for p := range int32(2) {
			recs = append(recs, &kgo.Record{Topic: "orders", Partition: p, Value: fmt.Appendf(nil, "order %d", i)})
			if i < 3 {
				recs = append(recs, &kgo.Record{Topic: "audit", Partition: p, Value: fmt.Appendf(nil, "audit %d", i)})
			}
		}
		recs = append(recs, &kgo.Record{Topic: "payments", Value: fmt.Appendf(nil, "payment %d", i)},
			&kgo.Record{Topic: "payments", Value: fmt.Appendf(nil, "payment %d", 10+i)})
		if i < 6 {
			recs = append(recs, &kgo.Record{Topic: "refunds", Value: fmt.Appendf(nil, "refund %d", i)})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	must(t, cl.ProduceSync(ctx, recs...).FirstErr())
}

// TestStatusPageInChromium loads the status page in headless Chromium and
// uses it as an operator would: it sees a partition in backoff with its
// retry number, a stopped one, a function's partitions waiting out an
// outage (and the same in /status.json) and a function's parked entries,
// signs in with the token, clicks Resume,
// and sees the partition flow again and its checkpoint move. Before the
// click, a page on another site whose name was rebound to the host's
// address (DNS rebinding) tries to read the status and to skip the
// partition from another tab, and is refused. The page is
// never reloaded by the test: what it sees after the first load comes from
// the page's own refresh. A screenshot is saved in the test's artifact
// directory (go test -artifacts keeps it) and, when REDELIVER_SCREENSHOT
// names a file, there too.
func TestStatusPageInChromium(t *testing.T) {
	exe := chromium()
	if exe == "" {
		t.Skip("no Chromium found (set REDELIVER_CHROMIUM, or install Debian's chromium: apt-get install -y chromium; scripts/test.sh installs it)")
	}
	var fixed atomic.Bool
	page := startHost(t, &fixed)

	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(exe),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		// What a rebinding DNS server does to evil.example: its name now
		// resolves to the host's address.
		chromedp.Flag("host-resolver-rules", "MAP evil.example 127.0.0.1"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1200, 1450),
	}
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	defer acancel()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, tcancel := context.WithTimeout(ctx, 2*wait)
	defer tcancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("load %s in %s: %v", page, exe, err)
	}
	t.Logf("loaded %s in %s", page, exe)

	// Waits go through the page's own refresh: read the live DOM until the
	// condition holds (a read during a reload fails and is tried again).
	waitPage := func(what, js string) string {
		t.Helper()
		deadline := time.Now().Add(wait)
		var last string
		var lastErr error
		for time.Now().Before(deadline) {
			last, lastErr = chromedp.Run(ctx, chromedp.Evaluate[string](js))
			if lastErr == nil && last != "" {
				return last
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("waiting for %s: last %q, %v", what, last, lastErr)
		return ""
	}
	row := func(fn, topic string, p int) string { return fmt.Sprintf("#p-%s-%s-%d", fn, topic, p) }
	// rowText returns the text of a row when it is in state, else "".
	rowText := func(id, state string) string {
		return fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r && r.dataset.state === %q ? r.innerText : ""; })()`, id, state)
	}

	backoff := waitPage("orders/1 in backoff", rowText(row("orders", "orders", 1), "backoff"))
	if !strings.Contains(backoff, "retry 1 of 5") || !strings.Contains(backoff, "inventory service timed out") {
		t.Errorf("orders/1 row = %q, want retry 1 of 5 with its error", backoff)
	}
	stopped := waitPage("payments/0 stopped", rowText(row("payments", "payments", 0), "stopped"))
	if !strings.Contains(stopped, "stopped after 2 retries") || !strings.Contains(stopped, "currency XTS") {
		t.Errorf("payments/0 row = %q, want stopped after 2 retries with its error", stopped)
	}
	// The stop is committed with the checkpoint, for a next owner: the
	// row says what, as the engine decodes it.
	if committed := waitPage("payments/0's committed stop", `document.querySelector("#p-payments-payments-0 .committed")?.innerText || ""`); !strings.Contains(committed, "committed state: record at offset 7: stopped by StopPartition after 3 deliveries (retries spent)") ||
		!strings.Contains(committed, "currency XTS") {
		t.Errorf("payments/0's committed state = %q, want the stop at offset 7 after 3 deliveries with its error", committed)
	}
	// audit's downstream is down: both partitions wait out the outage,
	// which the function's header shows; /status.json says the same.
	outage := waitPage("audit's partitions in the outage state", `(() => {
  const rows = [0, 1].map(p => document.querySelector("#p-audit-audit-" + p));
  return rows.every(r => r && r.dataset.state === "outage") ? rows.map(r => r.innerText).join("\n") : "";
})()`)
	for _, want := range []string{"waiting out an outage of the downstream", "no retry is spent meanwhile", "ledger service unavailable"} {
		if strings.Count(outage, want) != 2 {
			t.Errorf("audit's rows =\n%s\nwant %q on both", outage, want)
		}
	}
	chip := waitPage("audit's outage", `document.querySelector("#outage-audit")?.innerText || ""`)
	if !strings.Contains(chip, "downstream outage since") || !strings.Contains(chip, "0 probes") {
		t.Errorf("audit's outage = %q, want the outage with its probes", chip)
	}
	if header := waitPage("the header", `document.querySelector("header").innerText`); !strings.Contains(header, "2 waiting out an outage") {
		t.Errorf("header = %q, want 2 partitions waiting out an outage", header)
	}
	checkOutageJSON(t, page+"status.json")

	parked := waitPage("refunds' two parked entries", `(() => { const p = document.querySelector("#parked-refunds"); return p && p.dataset.count === "2" ? p.innerText : ""; })()`)
	if !strings.Contains(parked, "2 parked") {
		t.Errorf("refunds' re-drive line = %q, want 2 parked", parked)
	}
	entries := waitPage("refunds' entry rows", `Array.from(document.querySelectorAll("#fn-refunds tr.entry")).map(r => r.dataset.key + ": " + r.innerText.replace(/\s+/g, " ")).join("\n")`)
	for _, want := range []string{"refunds/0/2: refunds/0 offset 2 REDELIVER_PARKED 0", "refund 2: order not found", "refunds/0/4: refunds/0 offset 4"} {
		if !strings.Contains(entries, want) {
			t.Errorf("refunds' entries =\n%s\nwant %q", entries, want)
		}
	}
	// Each entry's next re-drive is the redrive section's expiry (15m)
	// after it was parked: compare the two times the row shows, not the
	// countdown, which depends on when the page was rendered.
	times := regexp.MustCompile(`(\d\d:\d\d:\d\d\.\d{3}) .*? ago (\d\d:\d\d:\d\d\.\d{3}) in `).FindAllStringSubmatch(entries, -1)
	if len(times) != 2 {
		t.Errorf("refunds' entries =\n%s\nwant two rows with the parked time and the next re-drive", entries)
	}
	for _, m := range times {
		parkedAt, err1 := time.Parse("15:04:05.000", m[1])
		next, err2 := time.Parse("15:04:05.000", m[2])
		if next.Before(parkedAt) {
			next = next.Add(24 * time.Hour) // past midnight
		}
		if err1 != nil || err2 != nil || next.Sub(parkedAt) != 15*time.Minute {
			t.Errorf("entry parked at %s, next re-drive at %s: want 15m later (the redrive section's expiry)", m[1], m[2])
		}
	}
	checkpoint := waitPage("payments/0's checkpoint", fmt.Sprintf(`document.querySelector("%s td.checkpoint")?.innerText || ""`, row("payments", "payments", 0)))
	if checkpoint != "7" {
		t.Errorf("payments/0 checkpoint %q before Resume, want 7", checkpoint)
	}
	shot(t, ctx)

	// Sign in with the token: typing holds the page's refresh back.
	if err := chromedp.Do(ctx,
		chromedp.SendKeys(chromedp.CSS(`input[name=token]`), pageToken),
		chromedp.Click(chromedp.CSS(`header form button`)),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}
	waitPage("signed in", `document.body.innerText.includes("signed in for actions") ? "yes" : ""`)

	// Meanwhile, in another tab, a page on evil.example, whose name now
	// resolves to 127.0.0.1, tries to read the status and to skip the
	// stopped partition from its own origin: the host does not answer to
	// that name.
	evil := strings.Replace(page, "127.0.0.1", "evil.example", 1)
	ectx, ecancel := chromedp.NewContext(ctx)
	defer ecancel()
	if err := chromedp.Do(ectx, chromedp.Navigate(evil)); err != nil {
		t.Fatalf("load %s: %v", evil, err)
	}
	if text, err := chromedp.Run(ectx, chromedp.Evaluate[string](`document.body.innerText`)); err != nil || !strings.Contains(text, `does not answer to the name "evil.example"`) {
		t.Errorf("%s shows %q, %v: want the host's refusal", evil, text, err)
	}
	tries, err := chromedp.Run(ectx, chromedp.Evaluate[string](`(async () => {
  const form = "function=payments&topic=payments&partition=0";
  const out = [];
  for (const [method, path, body] of [["GET", "/status.json"], ["POST", "/actions/skip", form], ["POST", "/actions/resume", form]]) {
    const r = await fetch(path, {method, body, headers: body ? {"Content-Type": "application/x-www-form-urlencoded"} : {}});
    out.push(method + " " + path + ": " + r.status + " " + (await r.text()).slice(0, 60));
  }
  return out.join("\n");
})()`, chromedp.EvalAwaitPromise))
	if err != nil {
		t.Fatalf("requests from evil.example: %v", err)
	}
	for _, line := range strings.Split(tries, "\n") {
		if !strings.Contains(line, ": 403 refused: this host does not answer to the name") {
			t.Errorf("from evil.example, %s: want 403", line)
		}
	}
	if n := len(strings.Split(tries, "\n")); n != 3 {
		t.Errorf("from evil.example: %d answers, want 3:\n%s", n, tries)
	}
	ecancel()
	if still := waitPage("payments/0 still stopped", rowText(row("payments", "payments", 0), "stopped")); !strings.Contains(still, "stopped after 2 retries") {
		t.Errorf("payments/0 row after the requests from evil.example = %q", still)
	}

	// Click Resume. The click can land on a page being reloaded; it is
	// tried again while the partition is still stopped (a second Resume
	// would only be refused).
	fixed.Store(true)
	flowing := ""
	deadline := time.Now().Add(wait)
	for flowing == "" && time.Now().Before(deadline) {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		err := chromedp.Do(cctx, chromedp.Click(chromedp.CSS(row("payments", "payments", 0)+" button.resume")))
		ccancel()
		if err != nil {
			t.Logf("click Resume: %v (trying again)", err)
		}
		for end := time.Now().Add(3 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
			js := fmt.Sprintf(`(() => { const r = document.querySelector(%q); return r && r.dataset.state === "flowing" && r.querySelector("td.checkpoint").innerText === "20" ? r.innerText : ""; })()`,
				row("payments", "payments", 0))
			if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js)); err == nil && s != "" {
				flowing = s
				break
			}
		}
	}
	if flowing == "" {
		t.Fatal("payments/0 did not flow to checkpoint 20 after Resume")
	}
	if !strings.Contains(flowing, "resumed by an operator") {
		t.Errorf("payments/0 row after Resume = %q, want it to say it was resumed by an operator", flowing)
	}
	if still := waitPage("orders/1 still in backoff", rowText(row("orders", "orders", 1), "backoff")); !strings.Contains(still, "retry 1 of 5") {
		t.Errorf("orders/1 row = %q", still)
	}
}

// checkOutageJSON checks audit's outage in /status.json.
func checkOutageJSON(t *testing.T, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st host.Status
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s, %v", url, resp.Status, err)
	}
	for _, f := range st.Functions {
		if f.Name != "audit" {
			continue
		}
		if f.Outage == nil || f.Outage.Since.IsZero() {
			t.Errorf("/status.json: audit's outage %+v, want it in force", f.Outage)
		}
		for _, p := range f.Partitions {
			if p.State != host.StateOutage || p.Checkpoint > p.FirstOffset {
				t.Errorf("/status.json: audit/%d %s, checkpoint %d, batch from %d; want %s, the checkpoint withheld before the batch",
					p.Partition, p.State, p.Checkpoint, p.FirstOffset, host.StateOutage)
			}
		}
		if len(f.Partitions) != 2 {
			t.Errorf("/status.json: audit's partitions %+v, want 2", f.Partitions)
		}
		return
	}
	t.Errorf("/status.json has no function audit")
}

// shot saves a screenshot of the page.
func shot(t *testing.T, ctx context.Context) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Errorf("screenshot: %v", err)
		return
	}
	dirs := []string{filepath.Join(t.ArtifactDir(), "status-page.png")}
	if p := os.Getenv("REDELIVER_SCREENSHOT"); p != "" {
		dirs = append(dirs, p)
	}
	for _, p := range dirs {
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Errorf("screenshot: %v", err)
			continue
		}
		t.Logf("screenshot: %s", p)
	}
}
