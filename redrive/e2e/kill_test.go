package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/redeliver-go/redeliver/adapters/franz"
	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/pgstore"
	"github.com/redeliver-go/redeliver/stream"
	"github.com/redeliver-go/redeliver/stream/streamtest"
)

func TestMain(m *testing.M) {
	if os.Getenv("REDRIVE_E2E_CHILD") == "sweep" {
		if err := childSweep(); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// stallingPublisher publishes, says so on stdout, and then never returns:
// the scheduler is caught between a publish and its mark.
type stallingPublisher struct{ pub stream.Publisher }

func (p stallingPublisher) Publish(ctx context.Context, topic string, recs []stream.Record) error {
	if err := p.pub.Publish(ctx, topic, recs); err != nil {
		return err
	}
	fmt.Printf("published %d\n", len(recs))
	select {}
}

// childSweep is the child process of TestSchedulerKilledMidSweep: one sweep
// that publishes its first batch and stalls there.
func childSweep() error {
	ctx := context.Background()
	s, err := pgstore.Open(ctx, os.Getenv("REDELIVER_POSTGRES_URL"), pgstore.WithSchema(os.Getenv("REDRIVE_E2E_SCHEMA")))
	if err != nil {
		return err
	}
	at, err := time.Parse(time.RFC3339Nano, os.Getenv("REDRIVE_E2E_NOW"))
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(strings.Split(os.Getenv("REDRIVE_E2E_SEEDS"), ",")...))
	if err != nil {
		return err
	}
	pub, err := franz.NewPublisher(cl)
	if err != nil {
		return err
	}
	sch, err := redrive.NewScheduler(s, stallingPublisher{pub}, redrive.WithClock(streamtest.NewClock(at)),
		redrive.WithRetryTopic(os.Getenv("REDRIVE_E2E_TOPIC")), redrive.WithBatchSize(200))
	if err != nil {
		return err
	}
	ev := sch.Sweep(ctx)
	return fmt.Errorf("the sweep returned: %+v", ev)
}

// TestSchedulerKilledMidSweep kills a scheduler process with SIGKILL after
// it published a batch and before it marked it: nothing is lost (another
// scheduler re-drives every entry), and the only records published twice
// are the ones of that batch, the documented window.
func TestSchedulerKilledMidSweep(t *testing.T) {
	u := pgURL(t)
	seeds := kafkaEnvs()[0].seeds(t)
	topic := "retry-" + suffix()
	createTopics(t, seeds, 2, topic)
	schema := newSchema(t, u)
	store := openPG(t, u, schema)
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	const n = 1000
	if _, err := store.Park(ctxFor(t, 60*time.Second), parkedEntries(n, now, time.Hour)); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "REDRIVE_E2E_CHILD=sweep", "REDRIVE_E2E_SCHEMA="+schema, "REDRIVE_E2E_TOPIC="+topic,
		"REDRIVE_E2E_SEEDS="+strings.Join(seeds, ","), "REDRIVE_E2E_NOW="+now.Format(time.RFC3339Nano))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "published ") {
				line <- sc.Text()
				return
			}
		}
		close(line)
	}()
	select {
	case l, ok := <-line:
		if !ok {
			cmd.Wait()
			t.Fatal("the child ended without publishing")
		}
		t.Logf("child: %s; killing it with SIGKILL", l)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("the child did not publish within 60s")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	sch, err := redrive.NewScheduler(store, publisher(t, seeds), redrive.WithClock(streamtest.NewClock(now)), redrive.WithRetryTopic(topic), redrive.WithBatchSize(200))
	if err != nil {
		t.Fatal(err)
	}
	redriven := 0
	deadline := time.Now().Add(30 * time.Second)
	for redriven < n && time.Now().Before(deadline) { // the server may hold the dead child's locks a moment
		ev := sch.Sweep(ctxFor(t, 60*time.Second))
		if ev.Err != nil {
			t.Fatal(ev.Err)
		}
		redriven += ev.Redriven
	}
	if redriven != n {
		t.Fatalf("the surviving scheduler re-drove %d of %d entries", redriven, n)
	}
	if got := countStatus(t, store, redrive.Retrying); got != n {
		t.Fatalf("%d entries retrying, want %d", got, n)
	}
	recs := readAll(t, seeds, topic, n+200, 60*time.Second)
	count := map[string]int{}
	for _, r := range recs {
		count[header(r, redrive.HeaderKey)]++
	}
	twice := 0
	for i := range n {
		switch c := count[fmt.Sprintf("e-%06d", i)]; c {
		case 1:
		case 2:
			twice++
		default:
			t.Fatalf("e-%06d published %d times", i, c)
		}
	}
	if twice != 200 {
		t.Fatalf("%d entries published twice, want the 200 of the batch the child published before it was killed", twice)
	}
}
