package main

import "github.com/ratelimit-sidecar/ratelimit-sidecar/pkg/envoy"

// refHealthName is the gRPC health service name envoyproxy/ratelimit (the
// reference) reports, which its deployments probe.
const refHealthName = "ratelimit"

// healthNames are the gRPC health service names the sidecar reports: the
// server's, the RLS service's and the reference's; newServers adds RLQS's
// when it is served.
var healthNames = []string{"", envoy.ServiceName, refHealthName}
