// Package tcp is the data plane that runs everywhere: a destination pulls a
// published transfer over several parallel TCP streams, verifies each
// range's checksum as the bytes arrive, and resumes a range at its last
// received offset when a connection breaks.
//
// # Contract
//
//   - Backend.Publish starts (once) a server on Config.Addr (127.0.0.1:0 by
//     default) and registers the source under the plan's TransferID; the
//     Offer's URI is tcp://host:port/<escaped id>. Closing the Offer
//     unregisters it, closes the connections sending from it right now and
//     waits until none reads the source; Backend.Close stops the server and
//     every connection.
//   - Backend.Fetch opens up to Config.Streams connections to the URI's
//     server and hands out whole ranges to them. Each stream sends one
//     request per range (or per resumed remainder) and reads the bytes
//     straight into the sink (into its memory when the sink is a
//     dataplane.Slicer), hashing them on the way. Idle connections go back
//     to a per-Backend pool (Streams per server address), so the many small
//     pair transfers of a sharded plan do not each dial; a pooled
//     connection the server closed is redialled without counting a break.
//   - Resumption: the receiver owns the progress of every range (bytes
//     received and the running hash). When a read fails, the range goes back
//     to the queue with that progress, the stream redials after a backoff,
//     and the next request asks for the remainder only. After
//     Config.MaxReconnects broken connections the fetch fails with
//     dataplane.ErrIncomplete. A checksum mismatch is not retried: the bytes
//     arrived intact over TCP, so the source changed or the plan is wrong.
//   - Sending: from a dataplane.Slicer source the server writes the memory
//     directly; from an *os.File it uses sendfile(2) with an explicit offset
//     (no user-space copy, streams do not share a file position); from any
//     other io.ReaderAt it copies through one buffer per connection.
//     Config.BytesPerSecond caps the server's total send rate with a token
//     bucket shared by all its connections.
//   - Access: Config.ServerTLS and Config.ClientTLS run every connection
//     over TLS; MutualTLS builds both from the cluster's CA, certificate
//     and key (the NATS routes' files), so only a peer holding a
//     certificate of the cluster's CA fetches, and a fetcher only trusts a
//     server of that CA. New refuses an Addr off loopback (a wildcard
//     included) without a ServerTLS that requires and verifies client
//     certificates (ErrInsecure). A TLS refusal fails a Fetch at once with
//     ErrAuth; it is not redialled. Under TLS a file source is copied
//     through a buffer (sendfile cannot write into a TLS stream).
//
// # Wire protocol
//
// A request (big-endian): "ADP1", u16 id length, id, u32 range index, i64
// offset, i64 length. A reply: u8 status (0 ok), u16 message length, message;
// on status 0 exactly length bytes follow. Requests on one connection are
// sequential, so a connection is reused for the next range.
package tcp
