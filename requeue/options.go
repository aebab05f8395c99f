package requeue

import "github.com/aerie-dev/aerie/jsrequest"

// Options tune how requests to the server are made (see jsrequest); the
// zero value uses jsrequest's defaults.
type Options = jsrequest.Options

// request makes one request to the server through jsrequest.
var request = jsrequest.Do
