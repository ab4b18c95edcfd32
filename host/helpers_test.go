package host_test

import (
	"errors"

	"github.com/redeliver-go/redeliver/host/internal/hosttest"
)

// The host's tests that need a Kafka broker are in the module host/tests,
// so that this module requires no Kafka client; these run on in-memory
// streams (host.Source, and an Adapter over them).

// The shared helpers, under the names these tests use.
const wait = hosttest.Wait

var (
	waitFor   = hosttest.WaitFor
	parse     = hosttest.Parse
	start     = hosttest.Start
	get       = hosttest.Get
	status    = hosttest.Status
	post      = hosttest.Post
	partition = hosttest.Partition
)

var errBoom = errors.New("boom")
