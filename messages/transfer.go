package messages

import "strconv"

// Data-plane transfers (weights or token batches moved between nodes).

// ByteRange is one checksummed slice of a transferred object.
type ByteRange struct {
	// Name of the object (file, tensor) the range belongs to; may be empty.
	Name     string `cbor:"1,keyasint,omitempty"`
	Offset   int64  `cbor:"2,keyasint,omitempty"`
	Length   int64  `cbor:"3,keyasint,omitempty"`
	Checksum string `cbor:"4,keyasint,omitempty"`
}

func (r ByteRange) String() string {
	return strconv.Quote(r.Name) + "@" + strconv.FormatInt(r.Offset, 10) + "+" +
		strconv.FormatInt(r.Length, 10) + "#" + strconv.Quote(r.Checksum)
}

// TransferPlan assigns a transfer from Source to Destinations. Version: the
// weight version moved (0 for non-weight data).
type TransferPlan struct {
	Header
	TransferID   string      `cbor:"10,keyasint,omitempty"`
	Source       string      `cbor:"11,keyasint,omitempty"`
	Destinations []string    `cbor:"12,keyasint,omitempty"`
	Ranges       []ByteRange `cbor:"13,keyasint,omitempty"`
	// URI is the source location (file://, s3://, nccl://).
	URI string `cbor:"14,keyasint,omitempty"`
}

func (TransferPlan) Kind() Kind { return KindTransferPlan }
func (m TransferPlan) String() string {
	l := newLine("TransferPlan", m.Header).str("id", m.TransferID).str("source", m.Source).
		strs("dests", m.Destinations)
	return list(l, "ranges", m.Ranges, func(b []byte, r ByteRange) []byte { return append(b, r.String()...) }).str("uri", m.URI).done()
}

// TransferDone: one destination received and verified the whole transfer.
type TransferDone struct {
	Header
	TransferID  string `cbor:"10,keyasint,omitempty"`
	Destination string `cbor:"11,keyasint,omitempty"`
	Bytes       int64  `cbor:"12,keyasint,omitempty"`
}

func (TransferDone) Kind() Kind { return KindTransferDone }
func (m TransferDone) String() string {
	return newLine("TransferDone", m.Header).str("id", m.TransferID).str("dest", m.Destination).
		i64("bytes", m.Bytes).done()
}

// TransferFailed: one destination could not complete the transfer.
type TransferFailed struct {
	Header
	TransferID  string `cbor:"10,keyasint,omitempty"`
	Destination string `cbor:"11,keyasint,omitempty"`
	Reason      string `cbor:"12,keyasint,omitempty"`
	// Range is the failing range index into the plan's Ranges, −1 when not range-specific.
	Range int32 `cbor:"13,keyasint,omitempty"`
}

func (TransferFailed) Kind() Kind { return KindTransferFailed }
func (m TransferFailed) String() string {
	return newLine("TransferFailed", m.Header).str("id", m.TransferID).str("dest", m.Destination).
		str("reason", m.Reason).i64("range", int64(m.Range)).done()
}
