package retrystate_test

import (
	"errors"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/internal/retrystate"
)

func TestReadCommitted(t *testing.T) {
	at40 := retrystate.EncodeState(retrystate.State{Offset: 40, Retries: 2, FirstFailure: time.UnixMilli(1_700_000_000_000)})
	unnamed := "rd1;r=2" // written before states named their record
	for _, tc := range []struct {
		name    string
		at      int64
		md      string
		retries int
		foreign bool
		other   int64 // the record an *OtherRecordError names; 0 for none
		damaged bool
	}{
		{name: "empty", at: 40, md: ""},
		{name: "its own record", at: 40, md: at40, retries: 2},
		{name: "another record", at: 41, md: at40, other: 40},
		{name: "names none", at: 7, md: unnamed, retries: 2},
		{name: "foreign", at: 40, md: "committed by a tool", foreign: true},
		{name: "damaged", at: 40, md: "rd1;o=40;r=x", damaged: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := retrystate.ReadCommitted(tc.at, tc.md)
			var other *retrystate.OtherRecordError
			switch {
			case tc.foreign:
				if !errors.Is(err, retrystate.ErrForeignMetadata) {
					t.Fatalf("err = %v, want ErrForeignMetadata", err)
				}
			case tc.other != 0:
				if !errors.As(err, &other) || other.Offset != tc.other || other.Checkpoint != tc.at {
					t.Fatalf("err = %v, want an OtherRecordError naming %d at %d", err, tc.other, tc.at)
				}
			case tc.damaged:
				if err == nil || errors.Is(err, retrystate.ErrForeignMetadata) || errors.As(err, &other) {
					t.Fatalf("err = %v, want a damaged-metadata error", err)
				}
			case err != nil:
				t.Fatalf("err = %v", err)
			}
			if s.Retries != tc.retries {
				t.Errorf("Retries = %d, want %d (a reader applies only the state of the record at the checkpoint)", s.Retries, tc.retries)
			}
		})
	}
}

func TestAppliesTo(t *testing.T) {
	for _, tc := range []struct {
		offset, at int64
		want       bool
	}{{40, 40, true}, {40, 41, false}, {41, 40, false}, {-1, 40, true}, {0, 0, true}, {0, 1, false}} {
		if got := (retrystate.State{Offset: tc.offset}).AppliesTo(tc.at); got != tc.want {
			t.Errorf("State{Offset: %d}.AppliesTo(%d) = %v, want %v", tc.offset, tc.at, got, tc.want)
		}
	}
}
