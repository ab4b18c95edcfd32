package hostconfig

import (
	"testing"
	"time"
)

// TestBackoffAlgorithmUpper checks the longest delay Explain assumes for
// backoffAlgorithm against the preset itself, over every random value that
// can matter (the library takes it modulo a window of at most 65535ms).
func TestBackoffAlgorithmUpper(t *testing.T) {
	def := lookupStrategy("backoffAlgorithm")
	for _, s := range []Strategy{
		{Name: "backoffAlgorithm", InitialDelay: 500 * time.Millisecond, MaxDelay: 5 * time.Second},
		{Name: "backoffAlgorithm", InitialDelay: 5 * time.Millisecond, MaxDelay: 11 * time.Millisecond},
		{Name: "backoffAlgorithm", InitialDelay: 0, MaxDelay: 3 * time.Millisecond},
		{Name: "backoffAlgorithm", InitialDelay: 9 * time.Millisecond, MaxDelay: 4 * time.Millisecond},
	} {
		b, err := def.build(s)
		if err != nil {
			t.Fatal(err)
		}
		upper := def.upper(s)
		for n := 1; n <= 20; n++ {
			var longest time.Duration
			for k := 0; k <= 1<<16; k++ {
				longest = max(longest, b(n, 0, constRand(float64(k)/(1<<32))))
			}
			if got := upper(n, 0, nil); got != longest {
				t.Errorf("%+v: upper(%d) = %v, the preset's longest delay is %v", s, n, got, longest)
			}
		}
	}
}
