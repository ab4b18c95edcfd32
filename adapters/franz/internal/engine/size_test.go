package engine

import (
	"testing"
	"unsafe"
)

// TestClaimSize: every assigned partition holds a claim for as long as it
// is assigned, idle or not, and the runtime rounds an object of 481 to
// 512 bytes up to 512: a field that takes the claim past 480 bytes costs
// every partition 32 bytes (docs/BENCHMARKS.md, the heap per idle
// partition). On 64-bit platforms.
func TestClaimSize(t *testing.T) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		t.Skip("sizes are for 64-bit platforms")
	}
	if n := unsafe.Sizeof(claim{}); n > 480 {
		t.Fatalf("a claim is %d bytes, over the 480-byte size class: lay its fields (and the Coalescer's) out without padding, or take one out", n)
	}
}
