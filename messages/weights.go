package messages

// Weight flow: the publisher ships each new version, engines load it and
// acknowledge, and the version tracker raises the minimum routable version.

// WeightFormat is how a published version is encoded.
type WeightFormat string

const (
	WeightsFull  WeightFormat = "full"  // a complete checkpoint
	WeightsDelta WeightFormat = "delta" // SkyRL XOR+zstd delta against BaseVersion
	WeightsLoRA  WeightFormat = "lora"  // a LoRA adapter
)

// WeightsPublished announces that a version is durably available.
// Version: the published version.
type WeightsPublished struct {
	Header
	// BaseVersion is what a delta applies to (Version−1 normally; = Version for full).
	BaseVersion int64        `cbor:"10,keyasint,omitempty"`
	Format      WeightFormat `cbor:"11,keyasint,omitempty"`
	// URI locates it: file:///sync/delta-00000007, s3://bucket/key, nccl://group.
	URI string `cbor:"12,keyasint,omitempty"`
	// Checksum with an algorithm prefix, e.g. "xxh3-128:9f…".
	Checksum string `cbor:"13,keyasint,omitempty"`
	Bytes    int64  `cbor:"14,keyasint,omitempty"`
	// Step is the trainer step that produced the version.
	Step int64 `cbor:"15,keyasint,omitempty"`
}

func (WeightsPublished) Kind() Kind { return KindWeightsPublished }
func (m WeightsPublished) String() string {
	return newLine("WeightsPublished", m.Header).i64("base_v", m.BaseVersion).str("format", string(m.Format)).
		str("uri", m.URI).str("checksum", m.Checksum).i64("bytes", m.Bytes).i64("step", m.Step).done()
}

// LoadWeights tells one engine (or all, when Engine is empty) to load a
// published version. Version: the version to load.
type LoadWeights struct {
	Header
	Engine string       `cbor:"10,keyasint,omitempty"`
	Format WeightFormat `cbor:"11,keyasint,omitempty"`
	URI    string       `cbor:"12,keyasint,omitempty"`
	// BaseVersion is what the engine must hold before applying a delta.
	BaseVersion int64  `cbor:"13,keyasint,omitempty"`
	Checksum    string `cbor:"14,keyasint,omitempty"`
}

func (LoadWeights) Kind() Kind { return KindLoadWeights }
func (m LoadWeights) String() string {
	return newLine("LoadWeights", m.Header).str("engine", m.Engine).str("format", string(m.Format)).
		str("uri", m.URI).i64("base_v", m.BaseVersion).str("checksum", m.Checksum).done()
}

// EngineVersionAck: an engine now serves a version. The router sends an
// engine traffic only after it acknowledged the version it must serve.
// Version: the version served.
type EngineVersionAck struct {
	Header
	Engine string `cbor:"10,keyasint,omitempty"`
	URL    string `cbor:"11,keyasint,omitempty"`
}

func (EngineVersionAck) Kind() Kind { return KindEngineVersionAck }
func (m EngineVersionAck) String() string {
	return newLine("EngineVersionAck", m.Header).str("engine", m.Engine).str("url", m.URL).done()
}

// MinVersionSet raises the minimum policy version an engine must serve to be
// routable. Version: the newest published version when it was set.
type MinVersionSet struct {
	Header
	MinVersion int64 `cbor:"10,keyasint,omitempty"`
}

func (MinVersionSet) Kind() Kind { return KindMinVersionSet }
func (m MinVersionSet) String() string {
	return newLine("MinVersionSet", m.Header).i64("min_v", m.MinVersion).done()
}
