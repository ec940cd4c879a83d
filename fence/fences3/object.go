package fences3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/fencedio/fenced/fence"
)

// The names of the user metadata that carry an object's fencing state. S3
// sends each as the header "x-amz-meta-" + name and keeps names in lower
// case; the values are ASCII (see the guard spec, section 10).
const (
	// MetaScope is the scope the object is fenced under, encoded with
	// EncodeScope.
	MetaScope = "fencing-scope"
	// MetaToken is the highest token accepted for the object, in decimal.
	MetaToken = "fencing-token"
	// MetaSequence is the last sequence accepted under MetaToken, in
	// decimal, "0" when none.
	MetaSequence = "fencing-sequence"
	// MetaDeleted is "true" on a tombstone (Delete): the object has no
	// data, but it keeps its token so that stale writers stay refused.
	MetaDeleted = "fencing-deleted"
)

// metaPrefix is reserved: a caller's metadata may not use it.
const metaPrefix = "fencing-"

// bodyPrefix starts every body the guard writes: "fenced-s3 " + a write ID
// unique to the write + "\n", then the data. S3 ETags are digests of the
// body, so without a unique line two writes of the same data under
// different tokens would have the same ETag and a compare-and-set on it
// could not tell them apart.
const bodyPrefix = "fenced-s3 "

// maxWriteID is the longest write ID a reader accepts.
const maxWriteID = 64

// ErrCorruptObject is matched by the refusal to write over, or read, an
// object that a guard did not write: its fencing metadata is missing or
// malformed, or its body does not start with the guard's write line.
// Nothing is written.
var ErrCorruptObject = errors.New("fences3: object not written by a fencing guard")

// ErrScopeMismatch is matched by the refusal to write an object fenced
// under another scope: tokens of different scopes do not compare. Nothing
// is written.
var ErrScopeMismatch = errors.New("fences3: object fenced under another scope")

// ErrNotFound is matched when the object does not exist, or is a
// tombstone (Delete).
var ErrNotFound = errors.New("fences3: no such object")

// ErrExists is matched when PutData finds its key taken: data keys are
// written once.
var ErrExists = errors.New("fences3: data object already exists")

// ErrContention is matched when a write lost its compare-and-set race
// Config.Attempts times in a row: the guard could not decide. Nothing of
// the last attempt was written; the token was not refused.
var ErrContention = errors.New("fences3: too many concurrent writes to the object")

// EncodeScope returns the value of MetaScope for scope: each byte of its
// UTF-8 that is A-Z, a-z, 0-9, "-", ".", "_", "~" or "/" as it is, every
// other byte as "%" and two upper-case hex digits (Python's
// urllib.parse.quote(scope, safe="/")). S3 metadata values are ASCII, and
// S3 may trim their spaces; the encoding is one-to-one.
func EncodeScope(scope string) string {
	var b strings.Builder
	for i := 0; i < len(scope); i++ {
		c := scope[i]
		switch {
		case c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z', c >= '0' && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '/':
			b.WriteByte(c)
		default:
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// decodeScope reverses EncodeScope; ok is false for a value EncodeScope
// does not produce.
func decodeScope(v string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] != '%' {
			b.WriteByte(v[i])
			continue
		}
		if i+2 >= len(v) {
			return "", false
		}
		n, err := strconv.ParseUint(v[i+1:i+3], 16, 8)
		if err != nil {
			return "", false
		}
		b.WriteByte(byte(n))
		i += 2
	}
	s := b.String()
	return s, EncodeScope(s) == v
}

// Object is a guarded object as the guard reads it.
type Object struct {
	Key string
	// Data is the object's data, without the guard's write line. Get
	// fills it; Head does not.
	Data []byte
	// Scope is the scope the object is fenced under.
	Scope string
	// Token is the highest token accepted for the object.
	Token uint64
	// Sequence is the last sequence accepted under Token, 0 if none.
	Sequence uint64
	// Deleted is set on a tombstone: the object was deleted through the
	// guard and keeps only its token.
	Deleted bool
	// ETag is the S3 ETag of the stored object, as S3 returned it.
	ETag string
	// ContentType and Metadata are the caller's (PutOptions); Metadata
	// has no fencing names.
	ContentType string
	Metadata    map[string]string
}

// Head returns key's fencing state without its data. The error matches
// ErrNotFound when there is no object; a tombstone is returned with
// Deleted set.
func (b *Bucket) Head(ctx context.Context, key string) (Object, error) {
	out, err := b.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		if status(err) == 404 {
			return Object{}, fmt.Errorf("%w: %q", ErrNotFound, key)
		}
		return Object{}, fmt.Errorf("fences3: head %q: %w", key, err)
	}
	return parse(key, out.Metadata, aws.ToString(out.ETag), aws.ToString(out.ContentType))
}

// Get returns key's data and fencing state. The error matches ErrNotFound
// when there is no object or it is a tombstone (Head tells them apart),
// and ErrCorruptObject when a guard did not write it.
func (b *Bucket) Get(ctx context.Context, key string) (Object, error) {
	o, err := b.get(ctx, key)
	if err == nil && o.Deleted {
		return Object{}, fmt.Errorf("%w: %q was deleted under token %d", ErrNotFound, key, o.Token)
	}
	return o, err
}

func (b *Bucket) get(ctx context.Context, key string) (Object, error) {
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &b.bucket, Key: &key})
	if err != nil {
		if status(err) == 404 {
			return Object{}, fmt.Errorf("%w: %q", ErrNotFound, key)
		}
		return Object{}, fmt.Errorf("fences3: get %q: %w", key, err)
	}
	defer out.Body.Close()
	o, err := parse(key, out.Metadata, aws.ToString(out.ETag), aws.ToString(out.ContentType))
	if err != nil {
		return Object{}, err
	}
	body, err := io.ReadAll(out.Body)
	if err != nil {
		return Object{}, fmt.Errorf("fences3: get %q: %w", key, err)
	}
	if o.Data, err = unframe(key, body); err != nil {
		return Object{}, err
	}
	if o.Deleted && len(o.Data) > 0 {
		return Object{}, fmt.Errorf("%w: %q is a tombstone with data", ErrCorruptObject, key)
	}
	return o, nil
}

// Highest returns the highest token accepted for key, 0 if it has no
// object. It is refused with ErrScopeMismatch when key is fenced under
// another scope.
func (b *Bucket) Highest(ctx context.Context, scope, key string) (uint64, error) {
	if err := fence.ValidateScope(scope); err != nil {
		return 0, err
	}
	o, err := b.Head(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	if err := sameScope(scope, o); err != nil {
		return 0, err
	}
	return o.Token, nil
}

func sameScope(scope string, o Object) error {
	if o.Scope != scope {
		return fmt.Errorf("%w: %q is fenced under scope %q, not %q", ErrScopeMismatch, o.Key, trim(o.Scope), trim(scope))
	}
	return nil
}

// parse reads an object's fencing state from its metadata.
func parse(key string, md map[string]string, etag, contentType string) (Object, error) {
	o := Object{Key: key, ETag: etag, ContentType: contentType}
	fencing := map[string]string{}
	for k, v := range md {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, metaPrefix) {
			fencing[lk] = v
			continue
		}
		if o.Metadata == nil {
			o.Metadata = map[string]string{}
		}
		o.Metadata[lk] = v
	}
	corrupt := func(name, why string) (Object, error) {
		return Object{}, fmt.Errorf("%w: %q: %s %s", ErrCorruptObject, key, name, why)
	}
	scope, ok := fencing[MetaScope]
	if !ok {
		return corrupt(MetaScope, "is missing")
	}
	if o.Scope, ok = decodeScope(scope); !ok || fence.ValidateScope(o.Scope) != nil {
		return corrupt(MetaScope, fmt.Sprintf("is %q, not an encoded scope", trim(scope)))
	}
	tok, ok := fencing[MetaToken]
	if !ok {
		return corrupt(MetaToken, "is missing")
	}
	t, err := strconv.ParseUint(tok, 10, 64)
	if err != nil || t == 0 || tok[0] == '0' {
		return corrupt(MetaToken, fmt.Sprintf("is %q, not a token", trim(tok)))
	}
	o.Token = t
	seq, ok := fencing[MetaSequence]
	if !ok {
		return corrupt(MetaSequence, "is missing")
	}
	q, err := strconv.ParseUint(seq, 10, 64)
	if err != nil || q > fence.MaxSequence || (len(seq) > 1 && seq[0] == '0') {
		return corrupt(MetaSequence, fmt.Sprintf("is %q, not a sequence", trim(seq)))
	}
	o.Sequence = q
	switch d, ok := fencing[MetaDeleted]; {
	case !ok:
	case d == "true":
		o.Deleted = true
	default:
		return corrupt(MetaDeleted, fmt.Sprintf("is %q, not \"true\"", trim(d)))
	}
	return o, nil
}

// frame prefixes data with the guard's write line and a new write ID.
func frame(data []byte, id string) []byte {
	b := make([]byte, 0, len(bodyPrefix)+len(id)+1+len(data))
	b = append(b, bodyPrefix...)
	b = append(b, id...)
	b = append(b, '\n')
	return append(b, data...)
}

// unframe returns the data after the write line.
func unframe(key string, body []byte) ([]byte, error) {
	rest, ok := bytes.CutPrefix(body, []byte(bodyPrefix))
	if ok {
		id, data, found := bytes.Cut(rest, []byte("\n"))
		if found && validWriteID(id) {
			return data, nil
		}
	}
	return nil, fmt.Errorf("%w: %q does not start with the guard's write line", ErrCorruptObject, key)
}

func validWriteID(id []byte) bool {
	if len(id) == 0 || len(id) > maxWriteID {
		return false
	}
	for _, c := range id {
		if c <= ' ' || c > '~' {
			return false
		}
	}
	return true
}

func trim(s string) string {
	if len(s) > 40 {
		return s[:40] + "..."
	}
	return s
}

// status returns the HTTP status of the response err came with, 0 if it
// came with none (the request may not have reached the server, or its
// answer was lost).
func status(err error) int {
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) && re.Response != nil {
		return re.HTTPStatusCode()
	}
	return 0
}
