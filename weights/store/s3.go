package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config configures an S3-compatible store.
type S3Config struct {
	// Endpoint is host:port of the S3 API (no scheme), e.g. "127.0.0.1:9000".
	Endpoint string
	// Secure selects https (true) or http (false).
	Secure bool
	// Region of the bucket; empty lets the client discover it.
	Region string
	// AccessKey and SecretKey are static credentials; both empty means
	// anonymous access.
	AccessKey, SecretKey string
	// Bucket holds the objects; it must exist unless CreateBucket is set.
	Bucket string
	// CreateBucket creates Bucket when it does not exist.
	CreateBucket bool
	// Prefix is prepended to every key ("runs/abc/"), so one bucket can
	// hold several sync directories. Empty or ending in "/".
	Prefix string
	// PathStyle forces path-style requests (http://host/bucket/key), which
	// most self-hosted S3 servers need.
	PathStyle bool
}

// DefaultS3Config returns a config for a local S3-compatible server with
// path-style addressing; Endpoint and Bucket must still be set.
func DefaultS3Config() S3Config { return S3Config{PathStyle: true} }

// Validate names the first bad field.
func (c S3Config) Validate() error {
	switch {
	case c.Endpoint == "":
		return errors.New("store: s3: Endpoint is required (host:port)")
	case strings.Contains(c.Endpoint, "://"):
		return fmt.Errorf("store: s3: Endpoint %q must be host:port without a scheme (use Secure for https)", c.Endpoint)
	case c.Bucket == "":
		return errors.New("store: s3: Bucket is required")
	case c.Prefix != "" && !strings.HasSuffix(c.Prefix, "/"):
		return fmt.Errorf("store: s3: Prefix %q must end in /", c.Prefix)
	}
	return nil
}

// S3 is a Store in an S3-compatible bucket. A single PutObject is atomic
// in S3 (an object appears only when its upload completes), and S3 has had
// strong read-after-write consistency since 2020, so Commit is a Put.
type S3 struct {
	c   *minio.Client
	cfg S3Config
}

var _ Store = (*S3)(nil)

// NewS3 connects to the bucket described by cfg.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	opts := &minio.Options{Secure: cfg.Secure, Region: cfg.Region}
	if cfg.AccessKey != "" || cfg.SecretKey != "" {
		opts.Creds = credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, "")
	}
	if cfg.PathStyle {
		opts.BucketLookup = minio.BucketLookupPath
	}
	c, err := minio.New(cfg.Endpoint, opts)
	if err != nil {
		return nil, fmt.Errorf("store: s3: %w", err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("store: s3: bucket %s: %w", cfg.Bucket, err)
	}
	if !ok {
		if !cfg.CreateBucket {
			return nil, fmt.Errorf("store: s3: bucket %s does not exist (set CreateBucket to create it)", cfg.Bucket)
		}
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: cfg.Region}); err != nil {
			return nil, fmt.Errorf("store: s3: create bucket %s: %w", cfg.Bucket, err)
		}
	}
	return &S3{c: c, cfg: cfg}, nil
}

// Put implements Store.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	_, err := s.c.PutObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return fmt.Errorf("store: s3: put %s: %w", key, err)
	}
	return nil
}

// Commit implements Store.
func (s *S3) Commit(ctx context.Context, key string, data []byte) error {
	return s.Put(ctx, key, bytes.NewReader(data), int64(len(data)))
}

// Get implements Store.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	obj, err := s.c.GetObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.GetObjectOptions{})
	if err == nil {
		// GetObject is lazy; Stat makes the request so a missing key is
		// reported here rather than on the first Read.
		_, err = obj.Stat()
		if err != nil {
			obj.Close()
		}
	}
	if err != nil {
		if isS3NotFound(err) {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
		}
		return nil, fmt.Errorf("store: s3: get %s: %w", key, err)
	}
	return obj, nil
}

func isS3NotFound(err error) bool {
	code := minio.ToErrorResponse(err).Code
	return code == "NoSuchKey" || code == "NotFound" || minio.ToErrorResponse(err).StatusCode == 404
}

// List implements Store.
func (s *S3) List(ctx context.Context, prefix string) ([]string, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, err
	}
	var keys []string
	for obj := range s.c.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("store: s3: list %q: %w", prefix, obj.Err)
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, s.cfg.Prefix))
	}
	slices.Sort(keys)
	return keys, nil
}

// Delete implements Store.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	err := s.c.RemoveObject(ctx, s.cfg.Bucket, s.cfg.Prefix+key, minio.RemoveObjectOptions{})
	if err != nil && !isS3NotFound(err) {
		return fmt.Errorf("store: s3: delete %s: %w", key, err)
	}
	return nil
}
