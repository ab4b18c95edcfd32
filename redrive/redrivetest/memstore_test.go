package redrivetest_test

import (
	"testing"

	"github.com/redeliver-go/redeliver/redrive"
	"github.com/redeliver-go/redeliver/redrive/redrivetest"
)

func TestMemStoreConformance(t *testing.T) {
	redrivetest.Run(t, func(*testing.T) redrive.Store { return redrivetest.NewMemStore() })
}
