/**
 * The pieces of upstream OAuth that take hostile input or hold a bound: the `WWW-Authenticate`
 * parser (src/mcp/oauth.ts) and the authorizations under way (src/runtime/oauth.ts).
 */
import { describe, expect, it } from "vitest"
import { parseBearerChallenge } from "../../src/mcp/oauth.js"
import { MAX_PENDING, OAuthManager } from "../../src/runtime/oauth.js"
import type { TokenVault } from "../../src/runtime/oauth-tokens.js"
import { STORE_SCOPE } from "../../src/domain/service.js"

describe("parseBearerChallenge", () => {
  it("reads resource_metadata, scope and error of a Bearer challenge", () => {
    expect(parseBearerChallenge('Bearer error="invalid_token", resource_metadata="http://a/.well-known/oauth-protected-resource/mcp", scope="mcp:tools x"')).toEqual({
      error: "invalid_token",
      resourceMetadataUrl: "http://a/.well-known/oauth-protected-resource/mcp",
      scope: "mcp:tools x"
    })
  })

  it("is not a challenge without the Bearer scheme, or past its length cap", () => {
    expect(parseBearerChallenge(undefined)).toBeUndefined()
    expect(parseBearerChallenge('Basic realm="x"')).toBeUndefined()
    expect(parseBearerChallenge(`Bearer scope="${"a".repeat(5000)}"`)).toBeUndefined()
  })

  it("takes names like __proto__ and constructor as plain text", () => {
    expect(parseBearerChallenge('Bearer __proto__="x", constructor="y", scope="s"')).toEqual({ resourceMetadataUrl: undefined, scope: "s", error: undefined })
  })
})

describe("authorizations under way", () => {
  const manager = () => new OAuthManager({ find: () => undefined } as unknown as TokenVault, () => undefined, () => undefined)
  const pending = { service: "store/a", scope: STORE_SCOPE, name: "a", verifier: "", redirectUri: "http://127.0.0.1/oauth/callback" }

  it("are bounded: the oldest states are dropped past MAX_PENDING", () => {
    const m = manager()
    const first = m.newState(pending)
    for (let i = 0; i < MAX_PENDING + 50; i++) m.newState(pending)
    expect(m.pendingCount).toBe(MAX_PENDING)
    expect(m.takeState(first)).toBeUndefined()
  })

  it("use a state once", () => {
    const m = manager()
    const state = m.newState(pending)
    expect(m.takeState(state)?.name).toBe("a")
    expect(m.takeState(state)).toBeUndefined()
  })
})
