package checkpoint

// DefaultMaxMetadataBytes is the broker's default offset.metadata.max.bytes:
// the most bytes of metadata a Kafka broker stores with a committed offset.
const DefaultMaxMetadataBytes = 4096

// DefaultMaxErrorBytes is how many bytes of a retrying record's last error
// the commit's metadata keeps by default in key-ordered mode, "…" included
// when it was cut.
const DefaultMaxErrorBytes = 64

// WindowLimits bounds the metadata of a key-ordered partition's commit
// (stream.WithWindowLimits): the records finished above the checkpoint
// and the retry state of each record still retrying, which the engine
// keeps in a window of the partition's records (docs/KEYS.md). The zero
// value is the defaults.
type WindowLimits struct {
	// MaxBytes is the most bytes the window's metadata may ever take:
	// the broker's offset.metadata.max.bytes (a managed service may allow
	// less). 0 means DefaultMaxMetadataBytes.
	MaxBytes int
	// MaxErrorBytes is how many bytes of each retrying record's last
	// error the window keeps, "…" included when it was cut. 0 means
	// DefaultMaxErrorBytes; -1 keeps none. Each record the window admits
	// reserves room for its failure with an error this long.
	MaxErrorBytes int
	// ReserveOnFailure makes a record reserve room for its retry state
	// only once it holds one, instead of from its admission: the window
	// then admits a record while its offsets, the states it holds and
	// room for one more state (so that one record can always fail) fit,
	// and a record that fails while it holds no state yet waits for room
	// when its state could make the metadata too long. The metadata still never passes
	// MaxBytes; what changes is that a record that failed may have to wait
	// for room before its state is kept. A window admits many more records
	// at once this way (see docs/KEYS.md).
	ReserveOnFailure bool
}
