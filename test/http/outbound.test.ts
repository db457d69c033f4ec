/**
 * The outbound policy, against a local HTTP server that records every request
 * it receives: forbidden headers are refused at add time (and nothing is sent), no redirect is
 * followed by either HTTP transport, an error answer's body is reflected into last_error for at most
 * 200 characters, and metadata addresses are refused (network_check too) unless allowed.
 */
import { createServer, type IncomingHttpHeaders, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { UpstreamPolicy } from "../../src/mcp/upstream-policy.js"
import { startTestServer, waitStatus, type TestServer } from "../support/index.js"

interface Received {
  readonly method: string
  readonly url: string
  readonly headers: IncomingHttpHeaders
}

/** A server that answers /redirect* with a 302 to /target, /error with a 500 and a long body, and records everything. */
const recordingServer = async (): Promise<{ server: Server; base: string; received: Received[] }> => {
  const received: Received[] = []
  const server = createServer((req, res) => {
    received.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers })
    req.resume()
    if (req.url?.startsWith("/redirect")) res.writeHead(302, { location: "/target" }).end()
    else if (req.url?.startsWith("/error")) res.writeHead(500, { "content-type": "text/plain" }).end(`SECRET-BODY-START${"z".repeat(5000)}SECRET-BODY-END`)
    else res.writeHead(404).end()
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return { server, base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received }
}

describe("outbound policy", () => {
  let server: TestServer
  let upstream: Awaited<ReturnType<typeof recordingServer>>

  beforeAll(async () => {
    upstream = await recordingServer()
    server = await startTestServer()
  }, 30_000)
  afterAll(async () => {
    await server?.cleanup()
    await new Promise((resolve) => upstream?.server.close(resolve))
  })

  it("refuses forbidden and CR/LF headers with 400, names them, changes nothing and sends nothing", async () => {
    const before = upstream.received.length
    for (const headers of [
      { Host: "internal.example" },
      { "Transfer-Encoding": "chunked" },
      { "content-length": "5" },
      { Connection: "close" },
      { "Proxy-Authorization": "x" },
      { Upgrade: "h2c" },
      { "x-ok": "a\r\nX-Injected: 1" }
    ]) {
      const reply = await server.post("/for_store/add_service", { name: "bad-headers", url: `${upstream.base}/mcp`, headers })
      expect(reply.status, JSON.stringify(headers)).toBe(400)
      const name = Object.keys(headers)[0]!
      expect(reply.body.error.details.fields.map((f: { field: string }) => f.field)).toContain(`headers.${name}`)
    }
    expect((await server.get("/for_store/list_services")).body.services).toEqual([])
    expect(upstream.received.length).toBe(before)
  })

  it("follows no redirect (Streamable HTTP and SSE), and reflects at most 200 characters of an error body", async () => {
    const reply = await server.post("/for_store/add_service", [
      { name: "redir-http", url: `${upstream.base}/redirect/mcp` },
      { name: "redir-sse", url: `${upstream.base}/redirect/sse`, transport: "sse" },
      { name: "error-body", url: `${upstream.base}/error/mcp` }
    ])
    expect(reply.status, reply.text).toBe(200)
    for (const name of ["redir-http", "redir-sse", "error-body"]) await waitStatus(server, "/for_store", name, ["reconnecting", "unreachable"], 15)
    expect(upstream.received.filter((r) => r.url === "/target"), JSON.stringify(upstream.received.map((r) => [r.method, r.url, r.headers["user-agent"], r.headers["accept"]]))).toEqual([])
    expect(upstream.received.some((r) => r.url.startsWith("/redirect/mcp"))).toBe(true)
    expect(upstream.received.some((r) => r.url.startsWith("/redirect/sse"))).toBe(true)
    const info = await server.get("/for_store/get_service_info?name=error-body")
    const lastError: string = info.body.service.last_error
    expect(lastError).toContain("HTTP 500")
    expect(lastError).toContain("SECRET-BODY-START")
    expect(lastError).not.toContain("SECRET-BODY-END")
    expect(lastError.length).toBeLessThan(600)
    expect(lastError).not.toMatch(/z{201}/)
  })

  it("refuses metadata addresses by default, for services and network_check", async () => {
    const reply = await server.post("/for_store/add_service", { name: "metadata", url: "http://169.254.169.254/latest/meta-data" })
    expect(reply.status, reply.text).toBe(200)
    await waitStatus(server, "/for_store", "metadata", "unreachable", 15)
    const info = await server.get("/for_store/get_service_info?name=metadata")
    expect(info.body.service.last_error).toMatch(/metadata address, refused/)
    expect(info.body.service.hint).toMatch(/--upstream-allow/)
    const check = await server.post("/for_store/network_check", { endpoints: ["http://169.254.169.254/", "http://[fd00:ec2::254]/"] })
    expect(check.status, check.text).toBe(200)
    for (const r of check.body.results) {
      expect(r.reachable).toBe(false)
      expect(r.error).toMatch(/refused/)
    }
  })

  it("--upstream-allow: globs and CIDRs, checked on the addresses a name resolves to", async () => {
    const policy = new UpstreamPolicy({ allow: ["10.0.0.0/8", "*.example.com", "::1"] })
    expect(policy.refusal("a.example.com", "192.0.2.1")).toBeUndefined()
    expect(policy.refusal("other.test", "10.1.2.3")).toBeUndefined()
    expect(policy.refusal("localhost", "::1")).toBeUndefined()
    expect(policy.refusal("localhost", "127.0.0.1")).toMatch(/not in --upstream-allow/)
    expect(policy.refusal("a.example.com", "169.254.169.254")).toMatch(/metadata/)
    expect(new UpstreamPolicy({ allowMetadata: true }).refusal("m", "169.254.169.254")).toBeUndefined()
    expect(new UpstreamPolicy().refusal("m", "::ffff:169.254.169.254")).toMatch(/metadata/)
    // The lookup the Streamable HTTP transport uses refuses a name whose addresses are not allowed.
    const refused = await new Promise<Error | null>((resolve) => policy.lookup("localhost", { family: 4 }, (e: Error | null) => resolve(e)))
    expect(refused?.message).toMatch(/upstream refused/)
    const allowed = await new Promise<Error | null>((resolve) => new UpstreamPolicy({ allow: ["127.0.0.0/8"] }).lookup("localhost", { family: 4 }, (e: Error | null) => resolve(e)))
    expect(allowed).toBeNull()
  })
})
