package envoy

// NestedGroups is groups, for the tests of package envoy_test.
var NestedGroups = groups
