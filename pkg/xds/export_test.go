package xds

import "time"

// Render is render, for the table tests of what a push means.
var Render = render

// SetQuietAfter sets how long an open stream may carry no push before
// the client warns. Call it before Watch.
func SetQuietAfter(c *Client, d time.Duration) { c.quiet = d }
