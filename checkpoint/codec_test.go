package checkpoint_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redeliver-go/redeliver/checkpoint"
)

func TestStateRoundTrip(t *testing.T) {
	for _, s := range []checkpoint.State{
		{},
		{Retries: 3, FirstFailure: time.UnixMilli(1732262400000)},
		{Retries: 1<<31 - 1, FirstFailure: time.UnixMilli(1<<62 - 1), LastDelay: 1_000_000 * time.Hour, NextAt: time.UnixMilli(1 << 50)},
	} {
		md := checkpoint.EncodeState(s)
		if len(md) >= 1024 {
			t.Fatalf("metadata %d bytes", len(md))
		}
		got, err := checkpoint.DecodeState(md)
		if err != nil {
			t.Fatalf("%q: %v", md, err)
		}
		if got.Retries != s.Retries || !got.FirstFailure.Equal(s.FirstFailure) || got.LastDelay != s.LastDelay || !got.NextAt.Equal(s.NextAt) {
			t.Fatalf("%q decoded to %+v, want %+v", md, got, s)
		}
	}
	if md := checkpoint.EncodeState(checkpoint.State{Retries: 3, FirstFailure: time.UnixMilli(1732262400000)}); md != "rd1;r=3;f=1732262400000" {
		t.Fatalf("encoding %q", md)
	}
}

func TestDecodeStateForeignAndDamaged(t *testing.T) {
	for _, md := range []string{"{\"app\":1}", "rd10;r=3", "rd", "hello"} {
		if _, err := checkpoint.DecodeState(md); !errors.Is(err, checkpoint.ErrForeignMetadata) {
			t.Errorf("%q: %v, want ErrForeignMetadata", md, err)
		}
	}
	for _, md := range []string{"rd1;r=x", "rd1;r=-1", "rd1;r", "rd1;f=99999999999999999999", "rd1;r=4294967296"} {
		_, err := checkpoint.DecodeState(md)
		if err == nil || errors.Is(err, checkpoint.ErrForeignMetadata) || !strings.Contains(err.Error(), "checkpoint: metadata") {
			t.Errorf("%q: %v, want a damage error", md, err)
		}
	}
	s, err := checkpoint.DecodeState("rd1;r=2;zz=9;x=1")
	if err != nil || s.Retries != 2 {
		t.Fatalf("unknown fields: %+v %v", s, err)
	}
}

func FuzzDecodeState(f *testing.F) {
	for _, s := range []string{"", "rd1;r=3;f=1732262400000", "rd1;r=1;d=5000;n=1", "rd1;;", "rd1;r=", "other"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, md string) {
		s, err := checkpoint.DecodeState(md)
		if err != nil {
			return
		}
		again, err := checkpoint.DecodeState(checkpoint.EncodeState(s))
		if err != nil || again != s && !(again.FirstFailure.Equal(s.FirstFailure) && again.NextAt.Equal(s.NextAt) && again.Retries == s.Retries && again.LastDelay == s.LastDelay) {
			t.Fatalf("%q -> %+v -> %+v (%v)", md, s, again, err)
		}
	})
}
