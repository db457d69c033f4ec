/**
 * The pieces of upstream OAuth that take hostile input or hold a bound: the `WWW-Authenticate`
 * parser (src/mcp/oauth-client.ts) and the authorizations under way (src/runtime/upstream-oauth.ts).
 */
import { describe, expect, it } from "vitest"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { oauthFetch, parseBearerChallenge } from "../../src/mcp/oauth-client.js"
import { UpstreamPolicy } from "../../src/mcp/upstream-policy.js"
import { MAX_PENDING, MAX_PENDING_TOTAL, OAuthManager, redirectProblem } from "../../src/runtime/upstream-oauth.js"
import type { TokenVault } from "../../src/config/token-vault.js"
import { agentScope, STORE_SCOPE } from "../../src/domain/service-definition.js"

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
  const manager = () => new OAuthManager(
      { find: () => undefined, pendingRecords: () => [], putPending: async () => {}, removePending: async () => {}, findPending: async () => undefined, takePending: async () => undefined } as unknown as TokenVault, () => undefined, () => undefined, fetch)
  const pending = { service: "store/a", scope: STORE_SCOPE, name: "a", verifier: "", redirectUri: "http://127.0.0.1/oauth/callback" }

  it("are bounded: the oldest states are dropped past MAX_PENDING", async () => {
    const m = manager()
    const first = m.newState(pending)
    for (let i = 0; i < MAX_PENDING + 50; i++) m.newState(pending)
    expect(m.pendingCount).toBe(MAX_PENDING)
    expect(await m.takeState(first)).toBeUndefined()
  })

  it("are bounded per scope: an agent that fills its cap drops only its own oldest states", async () => {
    const m = manager()
    const other = m.newState({ ...pending, scope: agentScope("b"), service: "b/a" })
    const mine = m.newState({ ...pending, scope: agentScope("a"), service: "a/a" })
    for (let i = 0; i < MAX_PENDING + 50; i++) m.newState({ ...pending, scope: agentScope("a"), service: "a/a" })
    expect(m.pendingCount).toBe(MAX_PENDING + 1)
    expect(await m.takeState(mine)).toBeUndefined()
    expect((await m.takeState(other))?.service).toBe("b/a")
  })

  it("are bounded store-wide, however many scopes there are", () => {
    const m = manager()
    for (let i = 0; i < MAX_PENDING_TOTAL + 10; i++) m.newState({ ...pending, scope: agentScope(`agent-${i}`) })
    expect(m.pendingCount).toBe(MAX_PENDING_TOTAL)
  })

  it("use a state once", async () => {
    const m = manager()
    const state = m.newState(pending)
    expect((await m.takeState(state))?.name).toBe("a")
    expect(await m.takeState(state)).toBeUndefined()
  })
})

describe("redirect_uri", () => {
  const callback = "https://store.example.com/oauth/callback"
  it("may be the store's own callback or a loopback http(s) URL", () => {
    for (const ok of [callback, "http://127.0.0.1:8765/cb", "http://localhost/cb", "http://[::1]:9/x", "https://127.5.6.7/y"]) {
      expect(redirectProblem(ok, callback)).toBeUndefined()
    }
  })
  it("may not send the code to any other site, and says why", () => {
    for (const bad of ["https://evil.example/cb", "https://store.example.com/elsewhere", "ftp://127.0.0.1/x", "http://user:pw@127.0.0.1/x", "http://localhost.evil.example/", "not a url"]) {
      expect(redirectProblem(bad, callback)).toMatch(/store's own callback .*loopback.*no other site may receive it/)
    }
  })
})

describe("the fetch of OAuth requests", () => {
  let server: Server
  let base: string
  const stalled = new Set<import("node:http").ServerResponse>()

  const start = async () => {
    server = createServer((req, res) => {
      if (req.url === "/huge") {
        res.setHeader("content-type", "application/json")
        res.end(`{"issuer":"${"x".repeat(2 * 1024 * 1024)}"}`)
      } else if (req.url === "/stall") {
        res.setHeader("content-type", "application/json")
        res.write("{")
        stalled.add(res)
      } else if (req.url === "/redirect") {
        res.writeHead(302, { location: "http://169.254.169.254/latest/meta-data" }).end()
      } else res.end("{}")
    })
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  }

  it("bounds answers, time and redirects, and follows the outbound policy", async () => {
    await start()
    try {
      const f = oauthFetch(new UpstreamPolicy(), { maxBytes: 1024 * 1024, timeoutMs: 20_000 })
      await expect((await f(`${base}/huge`)).json()).rejects.toThrow(/larger than|too large|1048576/)
      // A body that never ends: the request's time limit ends it.
      const quick = oauthFetch(new UpstreamPolicy(), { timeoutMs: 300 })
      await expect(quick(`${base}/stall`).then((r) => r.text())).rejects.toThrow(/timeout|aborted/i)
      await expect(f(`${base}/redirect`)).rejects.toThrow(/redirects are not followed/)
      await expect(f("http://169.254.169.254/latest/meta-data")).rejects.toThrow(/upstream refused/)
      expect(await (await f(`${base}/ok`)).json()).toEqual({})
    } finally {
      for (const res of stalled) res.destroy()
      server.closeAllConnections()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })
})
