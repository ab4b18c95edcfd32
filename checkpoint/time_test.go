package checkpoint_test

import (
	"errors"
	"time"
)

// t0 is the time the engine's machine fails a batch at in these tests,
// and errBoom the error it fails with.
var (
	t0      = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	errBoom = errors.New("boom")
)
