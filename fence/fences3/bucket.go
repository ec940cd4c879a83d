package fences3

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/fencedio/fenced/fence"
)

// DefaultAttempts is the default of Config.Attempts.
const DefaultAttempts = 16

// Config configures a Bucket.
type Config struct {
	// Observer, if set, is told of every decision: acceptances after the
	// object is stored, stale tokens and duplicates as they are found.
	// Default: none.
	Observer fence.Observer
	// Verifier, if set, refuses every write whose token's signature
	// (fence.SignatureFrom its context) it does not accept, before
	// anything is read (see fence.NewSignedGuard). Default: none.
	Verifier *fence.Verifier
	// StrictSequences refuses a write whose sequence (fence.WithSequence)
	// under the current token is not the last one plus 1, with a
	// *fence.SequenceGapError. Default: any sequence above the last passes.
	StrictSequences bool
	// Attempts bounds the compare-and-set rounds of one write: a round
	// whose conditional PUT was refused (412) reads the object again and
	// decides again. Default DefaultAttempts.
	Attempts int
}

// Validate checks the configuration; New calls it.
func (c Config) Validate() error {
	if c.Attempts < 0 {
		return fmt.Errorf("fences3: Attempts is %d, must not be negative", c.Attempts)
	}
	return nil
}

func (c Config) attempts() int {
	if c.Attempts == 0 {
		return DefaultAttempts
	}
	return c.Attempts
}

// Bucket guards the objects of one S3 bucket: each object carries the
// highest token accepted for it in its own metadata, and every write is a
// conditional PutObject on the ETag it read (If-None-Match: * for a new
// object), so the check and the write are one atomic step in the server.
//
// Bucket is safe for concurrent use, also from many processes on one
// bucket.
type Bucket struct {
	client *s3.Client
	bucket string
	cfg    Config
}

// New returns a guard over the objects of bucket, reached with client. The
// server must honour If-Match and If-None-Match on PutObject (AWS S3 does,
// as do recent S3-compatible servers; one that ignores them gives no
// fencing at all).
func New(client *s3.Client, bucket string, cfg Config) (*Bucket, error) {
	if client == nil {
		return nil, errors.New("fences3: nil S3 client")
	}
	if bucket == "" {
		return nil, errors.New("fences3: empty bucket name")
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Bucket{client: client, bucket: bucket, cfg: cfg}, nil
}

// PutOptions are the object's own headers. The zero value stores neither.
type PutOptions struct {
	// ContentType is the object's Content-Type. Default: S3's.
	ContentType string
	// Metadata is the object's own user metadata. Names starting with
	// "fencing-" are the guard's and are refused.
	Metadata map[string]string
}

func (o *PutOptions) validate() error {
	if o == nil {
		return nil
	}
	for k := range o.Metadata {
		if strings.HasPrefix(strings.ToLower(k), metaPrefix) {
			return fmt.Errorf("fences3: metadata name %q is reserved for the guard", k)
		}
	}
	return nil
}

// content is what one round of a write stores.
type content struct {
	data        []byte
	contentType string
	metadata    map[string]string
	deleted     bool
}

// Put stores data at key if token is not stale for it (and, with a
// sequence in ctx, the write is not a duplicate), recording token as the
// object's highest. The object's previous data, content type and metadata
// are replaced.
//
// Errors: a *fence.StaleTokenError, *fence.DuplicateError or
// *fence.SequenceGapError with nothing written; ErrScopeMismatch and
// ErrCorruptObject with nothing written; ErrContention when other writers
// won the race Config.Attempts times; an error matching
// fence.ErrUnknownOutcome when the PUT got no answer or a 5xx one (it may
// have been stored: re-send it with the same sequence, see fence.Retry).
func (b *Bucket) Put(ctx context.Context, scope string, token uint64, key string, data []byte, opts *PutOptions) error {
	if err := opts.validate(); err != nil {
		return err
	}
	c := content{data: data}
	if opts != nil {
		c.contentType, c.metadata = opts.ContentType, opts.Metadata
	}
	return b.write(ctx, scope, token, key, false, func(Object) (content, error) { return c, nil })
}

// Update is a read-modify-write of key's data under token: it reads the
// object (GET), decides, calls fn with the current data (nil when there
// is no object or it is a tombstone) and stores what fn returns, keeping
// the object's content type and metadata, if the object has not changed
// since it was read (If-Match). Otherwise it reads again, decides again
// and calls fn again, up to Config.Attempts times: fn must have no effects
// of its own. Errors are Put's, and fn's as is.
func (b *Bucket) Update(ctx context.Context, scope string, token uint64, key string, fn func(data []byte) ([]byte, error)) error {
	return b.write(ctx, scope, token, key, true, func(cur Object) (content, error) {
		data, err := fn(cur.Data)
		return content{data: data, contentType: cur.ContentType, metadata: cur.Metadata}, err
	})
}

// Delete replaces key with a tombstone if token is not stale for it: an
// object without data whose metadata keeps the token (MetaDeleted), so a
// stale writer that comes later is still refused. Get then answers
// ErrNotFound; a later Put with a token at least as high stores data
// again. Errors are Put's. The guard never removes objects: S3 deletes
// (DeleteObject, lifecycle expiry) forget the token.
func (b *Bucket) Delete(ctx context.Context, scope string, token uint64, key string) error {
	return b.write(ctx, scope, token, key, false, func(Object) (content, error) {
		return content{deleted: true}, nil
	})
}

// PutLease is Put with the lease's key as the scope and its token; a stale
// rejection calls l.MarkLost (fence.ReportStale).
func (b *Bucket) PutLease(ctx context.Context, l fence.Lease, key string, data []byte, opts *PutOptions) error {
	return fence.ReportStale(l, b.Put(fence.LeaseContext(ctx, l), l.Key(), l.Token(), key, data, opts))
}

// UpdateLease is Update with the lease's key and token; a stale rejection
// calls l.MarkLost.
func (b *Bucket) UpdateLease(ctx context.Context, l fence.Lease, key string, fn func(data []byte) ([]byte, error)) error {
	return fence.ReportStale(l, b.Update(fence.LeaseContext(ctx, l), l.Key(), l.Token(), key, fn))
}

// DeleteLease is Delete with the lease's key and token; a stale rejection
// calls l.MarkLost.
func (b *Bucket) DeleteLease(ctx context.Context, l fence.Lease, key string) error {
	return fence.ReportStale(l, b.Delete(fence.LeaseContext(ctx, l), l.Key(), l.Token(), key))
}

// write is one guarded write: read, decide, conditional PUT, and again
// while the PUT loses its race.
func (b *Bucket) write(ctx context.Context, scope string, token uint64, key string, withData bool,
	next func(cur Object) (content, error)) error {
	if err := fence.Check(scope, token, 0); err != nil {
		return err
	}
	if key == "" {
		return errors.New("fences3: empty object key")
	}
	if b.cfg.Verifier != nil {
		if err := b.cfg.Verifier.Verify(scope, token, fence.SignatureFrom(ctx)); err != nil {
			return err
		}
	}
	seq := fence.SequenceFromContext(ctx)
	if seq > fence.MaxSequence {
		return fmt.Errorf("%w: %d is above %d", fence.ErrInvalidSequence, seq, uint64(fence.MaxSequence))
	}
	for range b.cfg.attempts() {
		var cur Object
		var err error
		if withData {
			cur, err = b.get(ctx, key)
			if cur.Deleted {
				cur.Data = nil
			}
		} else {
			cur, err = b.Head(ctx, key)
		}
		exists := err == nil
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return err
		default:
			if err := sameScope(scope, cur); err != nil {
				return err
			}
		}
		if err := fence.CheckSequence(scope, token, seq, cur.Token, cur.Sequence, b.cfg.StrictSequences); err != nil {
			b.refused(ctx, scope, token, seq, cur.Token, err)
			return err
		}
		c, err := next(cur)
		if err != nil {
			return err
		}
		in := &s3.PutObjectInput{
			Bucket:   &b.bucket,
			Key:      &key,
			Body:     bytes.NewReader(frame(c.data, rand.Text())),
			Metadata: fencingMetadata(c, scope, token, fence.NextLast(token, seq, cur.Token, cur.Sequence)),
		}
		if c.contentType != "" {
			in.ContentType = &c.contentType
		}
		if exists {
			in.IfMatch = aws.String(cur.ETag)
		} else {
			in.IfNoneMatch = aws.String("*")
		}
		_, err = b.client.PutObject(ctx, in, noRetries)
		switch {
		case err == nil:
			observe(ctx, b.cfg.Observer, fence.Decision{Scope: scope, Presented: token, Highest: cur.Token, Accepted: true, Sequence: seq})
			return nil
		case lostRace(err):
			if ctx.Err() != nil {
				return fmt.Errorf("fences3: put %q: %w", key, ctx.Err())
			}
			continue // another write changed the object since it was read: decide again
		}
		if s := status(err); s != 0 && s < 500 {
			return fmt.Errorf("fences3: put %q: %w", key, err) // refused by the server: nothing stored
		}
		return fmt.Errorf("%w: fences3: put %q token %d: %w", fence.ErrUnknownOutcome, key, token, err)
	}
	return fmt.Errorf("%w: %q, %d attempts", ErrContention, key, b.cfg.attempts())
}

// noRetries turns off the SDK's own retries for the conditional PUT: a
// re-sent PUT whose first copy was stored gets 412 (its own ETag), and the
// guard would take its own write for a competitor's. The guard answers
// fence.ErrUnknownOutcome instead, for the caller to re-send with the same
// sequence.
func noRetries(o *s3.Options) { o.Retryer = aws.NopRetryer{} }

// lostRace reports whether a conditional PUT was refused because the object
// changed since it was read: 412 Precondition Failed; 409
// ConditionalRequestConflict (AWS, for conditional writes in flight at
// once); NoSuchKey on If-Match (the object was removed meanwhile).
func lostRace(err error) bool {
	var ae smithy.APIError
	code := ""
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	switch status(err) {
	case 412:
		return true
	case 409:
		return code == "ConditionalRequestConflict"
	case 404:
		return code == "NoSuchKey"
	}
	return false
}

func fencingMetadata(c content, scope string, token, last uint64) map[string]string {
	md := make(map[string]string, len(c.metadata)+4)
	for k, v := range c.metadata {
		md[k] = v
	}
	md[MetaScope] = EncodeScope(scope)
	md[MetaToken] = strconv.FormatUint(token, 10)
	md[MetaSequence] = strconv.FormatUint(last, 10)
	if c.deleted {
		md[MetaDeleted] = "true"
	}
	return md
}

func (b *Bucket) refused(ctx context.Context, scope string, token, seq, highest uint64, err error) {
	if d, report, _ := fence.Rejected(fence.Decision{Scope: scope, Presented: token, Highest: highest, Sequence: seq}, err); report {
		observe(ctx, b.cfg.Observer, d)
	}
}

func observe(ctx context.Context, o fence.Observer, d fence.Decision) {
	if o == nil {
		return
	}
	d.Owner = fence.OwnerFromContext(ctx)
	o.Observe(ctx, d)
}
