package xds

// Render is render, for the table tests of what a push means.
var Render = render
