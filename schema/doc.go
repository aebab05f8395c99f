// Package schema defines what travels between aerie's roles: the msgpack
// wire types (Prompt, Result, DeadLetter), the JSON events and run manifest,
// and every stream, subject, consumer, bucket and header name. Nothing else
// in aerie spells a subject or a header by hand, so a `nats` CLI user can
// read this package as the map of what is on the wire.
//
// Wire types carry a schema version ("v"). A decoder that meets a version it
// does not know returns a *VersionError instead of guessing; an undecodable
// payload returns a *DecodeError. Neither ever panics.
//
// What an older reader cannot ignore is a feature (features.go): a run's
// manifest lists those it needs, and is of a version that readers older
// than features do not read when it needs any; each message repeats its
// own in HeaderNeeds, and a reader that lacks one leaves the work alone
// (LackError). Every wire field is part of its type from the start, tied
// to a feature, or noted as one old readers may ignore (wirefields.go),
// and the package's tests keep that list whole.
package schema
