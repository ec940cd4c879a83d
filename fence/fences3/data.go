package fences3

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/fencedio/fenced/fence"
)

// DataKey returns a new key for a data object of the commit pointer pattern
// (see the package doc): prefix, the token in 20 digits (so that keys sort
// by token), "-", and 26 random characters, so that no two writes share a
// key.
func DataKey(prefix string, token uint64) string {
	return fmt.Sprintf("%s%020d-%s", prefix, token, rand.Text())
}

// PutData creates the data object key, stamped with scope, token and the
// context's sequence in the fencing metadata, if key has no object yet
// (If-None-Match: *); otherwise it returns an error matching ErrExists and
// writes nothing. Its body is data as is.
//
// PutData is not fenced: data objects are written once, under keys no one
// else uses (DataKey), and only become part of the scope when a pointer
// naming them is written with Put, which is fenced. A stale writer's data
// objects are never named by a pointer; they are garbage to delete. After
// an error matching fence.ErrUnknownOutcome, write the data again under a
// new key: the first one may exist.
func (b *Bucket) PutData(ctx context.Context, scope string, token uint64, key string, data []byte, opts *PutOptions) error {
	if err := fence.Check(scope, token, 0); err != nil {
		return err
	}
	if key == "" {
		return errors.New("fences3: empty object key")
	}
	if err := opts.validate(); err != nil {
		return err
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
	c := content{}
	if opts != nil {
		c.contentType, c.metadata = opts.ContentType, opts.Metadata
	}
	in := &s3.PutObjectInput{
		Bucket:      &b.bucket,
		Key:         &key,
		Body:        bytes.NewReader(data),
		Metadata:    fencingMetadata(c, scope, token, seq),
		IfNoneMatch: aws.String("*"),
	}
	if c.contentType != "" {
		in.ContentType = &c.contentType
	}
	_, err := b.client.PutObject(ctx, in, noRetries)
	switch s := status(err); {
	case err == nil:
		return nil
	case s == 412 || lostRace(err):
		return fmt.Errorf("%w: %q", ErrExists, key)
	case s != 0 && s < 500:
		return fmt.Errorf("fences3: put %q: %w", key, err)
	}
	return fmt.Errorf("%w: fences3: put %q token %d: %w", fence.ErrUnknownOutcome, key, token, err)
}

// PutDataLease is PutData with the lease's key as the scope and its token.
func (b *Bucket) PutDataLease(ctx context.Context, l fence.Lease, key string, data []byte, opts *PutOptions) error {
	return b.PutData(fence.LeaseContext(ctx, l), l.Key(), l.Token(), key, data, opts)
}
