package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Open returns the store a location names, and a Closer to release it:
//
//	/path/to/sync, file:///path/to/sync      a local or NFS directory
//	s3://bucket/optional/prefix?endpoint=host:port[&secure=true][&region=r][&create=true]
//	nats://host:port/bucket[?storage=memory]
//
// S3 credentials come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY
// (anonymous when both are unset), never from the URL, so they stay out of
// shell history and logs.
func Open(ctx context.Context, location string) (Store, io.Closer, error) {
	if location == "" {
		return nil, nil, errors.New("store: empty location")
	}
	if !strings.Contains(location, "://") {
		s, err := NewLocal(location)
		return s, nopCloser{}, err
	}
	u, err := url.Parse(location)
	if err != nil {
		return nil, nil, fmt.Errorf("store: location %q: %w", location, err)
	}
	q := u.Query()
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, nil, fmt.Errorf("store: %q: file URLs name a local path (file:///path)", location)
		}
		s, err := NewLocal(u.Path)
		return s, nopCloser{}, err
	case "s3":
		cfg := DefaultS3Config()
		cfg.Bucket = u.Host
		cfg.Endpoint = q.Get("endpoint")
		cfg.Region = q.Get("region")
		if p := strings.Trim(u.Path, "/"); p != "" {
			cfg.Prefix = p + "/"
		}
		if cfg.Secure, err = boolParam(q, "secure"); err != nil {
			return nil, nil, err
		}
		if cfg.CreateBucket, err = boolParam(q, "create"); err != nil {
			return nil, nil, err
		}
		cfg.AccessKey, cfg.SecretKey = os.Getenv("AWS_ACCESS_KEY_ID"), os.Getenv("AWS_SECRET_ACCESS_KEY")
		s, err := NewS3(ctx, cfg)
		return s, nopCloser{}, err
	case "nats":
		bucket := strings.Trim(u.Path, "/")
		cfg := DefaultNATSConfig(bucket)
		if q.Get("storage") == "memory" {
			cfg.Storage = jetstream.MemoryStorage
		}
		nc, err := nats.Connect("nats://" + u.Host)
		if err != nil {
			return nil, nil, fmt.Errorf("store: nats %s: %w", u.Host, err)
		}
		s, err := NewNATS(ctx, nc, cfg)
		if err != nil {
			nc.Close()
			return nil, nil, err
		}
		return s, closerFunc(func() error { nc.Close(); return nil }), nil
	}
	return nil, nil, fmt.Errorf("store: location %q: unknown scheme %q (want a path, file://, s3:// or nats://)", location, u.Scheme)
}

func boolParam(q url.Values, name string) (bool, error) {
	v := q.Get(name)
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("store: query parameter %s=%q: want true or false", name, v)
	}
	return b, nil
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

type closerFunc func() error

func (f closerFunc) Close() error { return f() }
