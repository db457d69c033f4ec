// The built-in authorization server's budget per client address (src/http/oauth-server/address-budget.ts)
// on its open routes that keep something: the bucket's arithmetic on an injected clock, the IPv6 /64
// key and the bound on the buckets kept; then against a store with --auth-server, from two loopback
// addresses: one address past its authorization requests is answered 429 with Retry-After and keeps
// nothing (no consent waits for it), with one log line, while another address is served; the same for
// registrations.
import { request } from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { captureLogs, type CapturedLogs } from "../../src/logging/log.js"
import { AddressBudget, addressKey, budgetAddress, MAX_ADDRESSES } from "../../src/http/oauth-server/address-budget.js"
import { AUTHORIZE_PER_MINUTE, REGISTER_PER_MINUTE } from "../../src/http/oauth-server/endpoints.js"
import { startTestServer, type TestServer } from "../support/index.js"

describe("AddressBudget", () => {
  it("gives perMinute at once, then one per 60/perMinute seconds, and says how long to wait", () => {
    let now = 0
    const budget = new AddressBudget(6, () => now)
    for (let i = 0; i < 6; i++) expect(budget.take("10.0.0.1")).toEqual({ allowed: true })
    expect(budget.take("10.0.0.1")).toEqual({ allowed: false, retryAfterSeconds: 10, first: true })
    expect(budget.take("10.0.0.1")).toMatchObject({ allowed: false, first: false })
    // Another address has its own budget.
    expect(budget.take("10.0.0.2")).toEqual({ allowed: true })
    now += 9_999
    expect(budget.take("10.0.0.1").allowed).toBe(false)
    now += 1
    expect(budget.take("10.0.0.1")).toEqual({ allowed: true })
    // A new spell of refusals is reported again.
    expect(budget.take("10.0.0.1")).toMatchObject({ allowed: false, first: true })
  })

  it("counts an IPv6 address by its /64 and an IPv4-mapped one as IPv4", () => {
    expect(addressKey("2001:db8:0:1::5")).toBe(addressKey("2001:0db8:0000:0001:ffff:1:2:3"))
    expect(addressKey("2001:db8:0:1::5")).toBe("2001:db8:0:1::/64")
    expect(addressKey("2001:db8:0:2::5")).not.toBe(addressKey("2001:db8:0:1::5"))
    expect(addressKey("::1")).toBe("0:0:0:0::/64")
    expect(addressKey("fe80::1%eth0")).toBe("fe80:0:0:0::/64")
    expect(addressKey("::ffff:127.0.0.1")).toBe("127.0.0.1")
    expect(addressKey("127.0.0.1")).toBe("127.0.0.1")
    const budget = new AddressBudget(1, () => 0)
    expect(budget.take("2001:db8::1").allowed).toBe(true)
    expect(budget.take("2001:db8::2").allowed).toBe(false)
  })

  it("counts a request of a proxy (a loopback or private peer) by the client its X-Forwarded-For names last; a public peer by its own address", () => {
    expect(budgetAddress("127.0.0.1", "203.0.113.9")).toBe("203.0.113.9")
    // What a client wrote itself stands before what the proxy appended.
    expect(budgetAddress("::1", "198.51.100.1, 203.0.113.9")).toBe("203.0.113.9")
    // An ingress inside the network, behind another proxy of the network: the last address not private.
    expect(budgetAddress("10.2.0.5", "203.0.113.9, 10.1.1.1")).toBe("203.0.113.9")
    expect(budgetAddress("::ffff:192.168.1.20", " 2001:db8::5 ")).toBe("2001:db8::5")
    expect(budgetAddress("fd00::7", "198.51.100.3")).toBe("198.51.100.3")
    // Every address private (a client inside the network): the first, the client's.
    expect(budgetAddress("10.2.0.5", "10.0.0.7, 10.0.0.8")).toBe("10.0.0.7")
    expect(budgetAddress("127.0.0.1", "not an address")).toBe("127.0.0.1")
    expect(budgetAddress("127.0.0.1", undefined)).toBe("127.0.0.1")
    // A peer on a public address is taken as the client, whatever it writes.
    expect(budgetAddress("192.0.2.7", "203.0.113.9")).toBe("192.0.2.7")
    expect(budgetAddress("2001:db8::1", "203.0.113.9")).toBe("2001:db8::1")
  })

  it("keeps at most MAX_ADDRESSES buckets, forgetting the least recently used", () => {
    const budget = new AddressBudget(1, () => 0)
    expect(budget.take("10.0.0.1").allowed).toBe(true)
    for (let i = 0; i < MAX_ADDRESSES; i++) budget.take(`192.168.${i >> 8}.${i & 255}`)
    expect(budget.size).toBe(MAX_ADDRESSES)
    // 10.0.0.1 was the least recently used: forgotten, it starts full again.
    expect(budget.take("10.0.0.1").allowed).toBe(true)
    expect(budget.size).toBe(MAX_ADDRESSES)
  })
})

/** A request from `localAddress` (a loopback address of its own), its status, headers and body. */
const from = (localAddress: string, url: string, method = "GET", body?: string, headers: Record<string, string> = {}) =>
  new Promise<{ status: number; headers: Record<string, unknown>; text: string }>((resolve, reject) => {
    const req = request(url, { method, localAddress, agent: false, headers: { ...headers, ...(body === undefined ? {} : { "content-type": "application/json" }) } }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => (text += chunk))
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }))
    })
    req.on("error", reject)
    req.end(body)
  })

describe("the authorization server's open routes, per client address", () => {
  let server: TestServer
  let logs: CapturedLogs
  let authorizeUrl: string

  beforeAll(async () => {
    logs = captureLogs({ level: "warning", format: "json" })
    server = await startTestServer({ apiKey: "admin-key-for-budget-test", options: { auth_server: true, auth_dev_loopback_clients: true } })
    // A registered client (from a third address, so the budgets below start full).
    const registered = await from("127.0.0.3", `${server.url}/oauth/register`, "POST", JSON.stringify({ redirect_uris: ["http://127.0.0.1:9/cb"], client_name: "budget" }))
    expect(registered.status, registered.text).toBe(201)
    const clientId = (JSON.parse(registered.text) as { client_id: string }).client_id
    const query = new URLSearchParams({
      client_id: clientId,
      redirect_uri: "http://127.0.0.1:9/cb",
      response_type: "code",
      code_challenge: "a".repeat(43),
      code_challenge_method: "S256",
      resource: `${server.url}/for_agent/budget-agent/mcp`
    })
    authorizeUrl = `${server.url}/oauth/authorize?${query}`
  }, 30_000)

  afterAll(async () => {
    logs.restore()
    await server?.cleanup()
  })

  it(`authorization requests: ${AUTHORIZE_PER_MINUTE} a minute from one address, then 429 with Retry-After and no consent kept; another address is served`, async () => {
    for (let i = 0; i < AUTHORIZE_PER_MINUTE; i++) {
      const page = await from("127.0.0.1", authorizeUrl)
      expect(page.status, page.text).toBe(200)
      expect(page.text).toContain("consent-data")
    }
    const refused = await from("127.0.0.1", authorizeUrl)
    expect(refused.status).toBe(429)
    expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    expect(refused.text).toMatch(/Too many authorization requests from your address/)
    expect(refused.text).not.toContain("consent-data")
    expect((await from("127.0.0.1", authorizeUrl)).status).toBe(429)
    const other = await from("127.0.0.2", authorizeUrl)
    expect(other.status, other.text).toBe(200)
    const lines = logs.lines.filter((l) => l.includes('"oauth_rate_limited"') && l.includes("authorization requests"))
    expect(lines).toHaveLength(1)
    expect(JSON.parse(lines[0]!)).toMatchObject({ address: "127.0.0.1", level: "warn" })
  })

  it("behind a proxy on this machine, each client the proxy names has its own budget", async () => {
    const behind = (client: string) => from("127.0.0.6", authorizeUrl, "GET", undefined, { "x-forwarded-for": `10.9.9.9, ${client}` })
    for (let i = 0; i < AUTHORIZE_PER_MINUTE; i++) expect((await behind("203.0.113.20")).status).toBe(200)
    expect((await behind("203.0.113.20")).status).toBe(429)
    expect((await behind("203.0.113.21")).status).toBe(200)
    expect(logs.lines.some((l) => l.includes('"oauth_rate_limited"') && l.includes('"address":"203.0.113.20"'))).toBe(true)
  })

  it(`registrations: ${REGISTER_PER_MINUTE} a minute from one address, then 429 in OAuth's words; another address is served`, async () => {
    const register = (address: string) => from(address, `${server.url}/oauth/register`, "POST", JSON.stringify({ redirect_uris: ["http://127.0.0.1:9/cb"] }))
    for (let i = 0; i < REGISTER_PER_MINUTE; i++) expect((await register("127.0.0.4")).status).toBe(201)
    const refused = await register("127.0.0.4")
    expect(refused.status).toBe(429)
    expect(Number(refused.headers["retry-after"])).toBeGreaterThanOrEqual(1)
    expect(JSON.parse(refused.text)).toMatchObject({ error: "temporarily_unavailable", error_description: expect.stringMatching(/too many client registrations/) })
    expect((await register("127.0.0.5")).status).toBe(201)
  })
})
