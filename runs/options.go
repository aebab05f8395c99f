package runs

import "github.com/aerie-dev/aerie/jsrequest"

// Options tune how requests to the server are made (see jsrequest); the
// zero value uses jsrequest's defaults.
type Options = jsrequest.Options

// request makes one request to the server through jsrequest. Every
// request made here can be repeated: reads change nothing, and purging or
// deleting what is already gone is no error.
var request = jsrequest.Do
