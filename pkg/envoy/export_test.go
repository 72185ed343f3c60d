package envoy

// NestedGroups is groups, for the tests of package envoy_test.
var NestedGroups = groups

// Response and AddHeaders build the response to a decision as the server
// does, for the tests of package envoy_test.
var (
	Response   = response
	AddHeaders = addHeaders
)
