"""REST translated from the google.api.http annotations of the public protos,
and the OpenAPI document generated from the same descriptors."""
