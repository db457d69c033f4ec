/**
 * The browser-facing guards of every route (src/http/request-guard.ts, the contract middleware): Host and
 * Origin validation (DNS rebinding, cross-origin pages), CORS only for origins given with
 * --allowed-origins, strict JSON content types and body shapes, a body limit counted while the body
 * streams in, the connection cap, and 500 answers that keep their details in the log. Every refused
 * request leaves the services file byte for byte as it was. Requests go through node:http, which
 * (unlike fetch) lets a test choose the Host header.
 */
import { mkdirSync, rmSync } from "node:fs"
import { request as httpRequest, type IncomingHttpHeaders } from "node:http"
import { connect, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { captureLogs } from "../../src/logging/log.js"
import { fromStoreError } from "../../src/http/contract-errors.js"
import { localServicesPolicy } from "../../src/http/request-guard.js"
import { Forbidden } from "../../src/domain/errors.js"
import { startTestServer, type TestServer } from "../support/index.js"

interface RawReply {
  readonly status: number
  readonly headers: IncomingHttpHeaders
  readonly body: any
}

/** One request with full control of the headers (Host included); `host: null` sends none. */
const raw = (
  port: number,
  method: string,
  path: string,
  options: { readonly host?: string | null; readonly headers?: Record<string, string>; readonly body?: string } = {}
): Promise<RawReply> =>
  new Promise((resolve, reject) => {
    const headers: Record<string, string> = { ...options.headers }
    if (options.host !== null) headers["host"] = options.host ?? `127.0.0.1:${port}`
    const req = httpRequest({ host: "127.0.0.1", port, method, path, headers, setHost: false, agent: false }, (res) => {
      const chunks: Buffer[] = []
      res.on("data", (c: Buffer) => chunks.push(c))
      res.on("end", () => {
        const text = Buffer.concat(chunks).toString("utf8")
        let body: unknown = text
        try {
          body = JSON.parse(text)
        } catch {
          // not JSON (a page, an event stream)
        }
        resolve({ status: res.statusCode ?? 0, headers: res.headers, body })
      })
    })
    req.setTimeout(20_000, () => req.destroy(new Error("request timed out")))
    req.on("error", reject)
    req.end(options.body)
  })

const JSON_TYPE = { "content-type": "application/json" }
const definition = JSON.stringify({ name: "added", url: "http://127.0.0.1:9/mcp" })

/** The routes of every kind: the contract's, the MCP endpoint, the extras, the pages, an unknown path. */
const ROUTES: ReadonlyArray<readonly [string, string]> = [
  ["GET", "/health"],
  ["GET", "/for_store/list_services"],
  ["POST", "/for_store/add_service"],
  ["POST", "/for_store/call_tool"],
  ["POST", "/for_agent/a1/add_service"],
  ["POST", "/mcp"],
  ["POST", "/for_agent/a1/mcp"],
  ["GET", "/sse"],
  ["POST", "/messages?sessionId=x"],
  ["GET", "/for_agent/a1/sse"],
  ["GET", "/events"],
  ["GET", "/inspect/events"],
  ["GET", "/metrics"],
  ["GET", "/openapi.json"],
  ["GET", "/docs"],
  ["GET", "/ui"],
  ["GET", "/no/such/route"]
]

describe("Host and Origin", () => {
  let server: TestServer
  let port: number
  beforeAll(async () => {
    server = await startTestServer()
    port = server.running.port
  })
  afterAll(() => server.cleanup())

  it.each(["localhost", "127.0.0.1", "[::1]"])("accepts the loopback name %s with the listen port", async (name) => {
    const r = await raw(port, "GET", "/health", { host: `${name}:${port}` })
    expect(r.status).toBe(200)
  })

  it("refuses a foreign Host, a loopback name on another port, and a malformed or missing Host, on every route", async () => {
    const before = server.readFileText()
    for (const host of ["evil.example", `evil.example:${port}`, `localhost:${port + 1}`, `127.0.0.1.nip.io:${port}`, "a:b:c", "[::1"]) {
      for (const [method, path] of ROUTES) {
        const r = await raw(port, method, path, {
          host,
          headers: method === "POST" ? JSON_TYPE : {},
          ...(method === "POST" ? { body: definition } : {})
        })
        expect(r.status, `${method} ${path} with Host ${host}`).toBe(403)
        expect(r.body.error.code).toBe("FORBIDDEN_HOST")
        expect(r.headers["access-control-allow-origin"]).toBeUndefined()
      }
    }
    // Without any Host, Node's HTTP server answers 400 itself (HTTP/1.1 requires one).
    const none = await raw(port, "POST", "/for_store/add_service", { host: null, headers: JSON_TYPE, body: definition })
    expect(none.status).toBe(400)
    expect(server.readFileText()).toBe(before)
    expect((await server.get("/for_store/list_services")).body.services).toEqual([])
  })

  it("accepts the store's own origin and refuses any other, with no CORS header, on every route", async () => {
    const own = await raw(port, "POST", "/for_store/call_tool", {
      headers: { ...JSON_TYPE, origin: `http://127.0.0.1:${port}` },
      body: JSON.stringify({ tool_name: "nope" })
    })
    expect(own.status).toBe(404) // it reached the handler
    const before = server.readFileText()
    for (const origin of [`http://127.0.0.1:${port + 1}`, `http://localhost:${port}`, "https://evil.example", "null", "file://"]) {
      for (const [method, path] of ROUTES) {
        const r = await raw(port, method, path, {
          headers: { ...(method === "POST" ? JSON_TYPE : {}), origin },
          ...(method === "POST" ? { body: definition } : {})
        })
        expect(r.status, `${method} ${path} from ${origin}`).toBe(403)
        expect(r.body.error.code).toBe("FORBIDDEN_ORIGIN")
        expect(Object.keys(r.headers).filter((h) => h.startsWith("access-control-"))).toEqual([])
      }
    }
    expect(server.readFileText()).toBe(before)
  })

  it("refuses a cross-site browser request without Origin (an <img> or <script> GET), but lets a navigation through", async () => {
    const sub = await raw(port, "GET", "/for_store/list_services", { headers: { "sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors" } })
    expect(sub.status).toBe(403)
    expect(sub.body.error.code).toBe("FORBIDDEN_ORIGIN")
    const navigation = await raw(port, "GET", "/ui", { headers: { "sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate" } })
    expect(navigation.status).toBe(200)
    const sameOrigin = await raw(port, "GET", "/for_store/list_services", { headers: { "sec-fetch-site": "same-origin" } })
    expect(sameOrigin.status).toBe(200)
  })
})

describe("the operator", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer({ options: { log_level: "warning" } })
  })
  afterAll(() => server.cleanup())

  it("sees a refused request as a warning, at most one line per kind every 10 s, with the count of the others", async () => {
    const captured = captureLogs({ level: "debug" })
    const logged = captured.lines
    try {
      const port = server.running.port
      for (let i = 0; i < 5; i++) expect((await raw(port, "GET", "/health", { host: "proxy.example" })).status).toBe(403)
      expect((await raw(port, "GET", "/health", { headers: { origin: "https://evil.example" } })).status).toBe(403)
      const hosts = logged.filter((l) => l.includes("FORBIDDEN_HOST"))
      expect(hosts).toHaveLength(1)
      expect(hosts[0]).toMatch(/refused GET \/health \(FORBIDDEN_HOST\).*proxy\.example.*--allowed-hosts/)
      expect(logged.filter((l) => l.includes("FORBIDDEN_ORIGIN") && l.includes("https://evil.example"))).toHaveLength(1)
      expect(hosts[0]).toMatch(/^\S+Z WARN  refused/)
    } finally {
      captured.restore()
    }
  })
})

describe("--allowed-hosts and --allowed-origins", () => {
  let server: TestServer
  let port: number
  beforeAll(async () => {
    server = await startTestServer({ options: { allowed_hosts: ["store.lan", "box.lan:8443"], allowed_origins: ["https://dash.example"] } })
    port = server.running.port
  })
  afterAll(() => server.cleanup())

  it("accepts a name given without a port on any port, and one given with a port on that port only", async () => {
    expect((await raw(port, "GET", "/health", { host: "store.lan" })).status).toBe(200)
    expect((await raw(port, "GET", "/health", { host: `STORE.lan:${port}` })).status).toBe(200)
    expect((await raw(port, "GET", "/health", { host: "box.lan:8443" })).status).toBe(200)
    expect((await raw(port, "GET", "/health", { host: "box.lan" })).status).toBe(403)
    expect((await raw(port, "GET", "/health", { host: "store.lan.evil.example" })).status).toBe(403)
  })

  it("treats a request whose Origin is its own allowed Host as same-origin", async () => {
    const r = await raw(port, "GET", "/health", { host: "store.lan", headers: { origin: "https://store.lan" } })
    expect(r.status).toBe(200)
    expect(r.headers["access-control-allow-origin"]).toBeUndefined()
  })

  it("answers an allowed origin's preflight and marks its answers for CORS", async () => {
    const preflight = await raw(port, "OPTIONS", "/for_store/add_service", {
      headers: { origin: "https://dash.example", "access-control-request-method": "POST", "access-control-request-headers": "content-type" }
    })
    expect(preflight.status).toBe(204)
    expect(preflight.headers["access-control-allow-origin"]).toBe("https://dash.example")
    expect(preflight.headers["access-control-allow-methods"]).toContain("POST")
    expect(preflight.headers["access-control-allow-headers"]).toContain("content-type")
    const call = await raw(port, "POST", "/for_store/call_tool", {
      headers: { ...JSON_TYPE, origin: "https://dash.example" },
      body: JSON.stringify({ tool_name: "nope" })
    })
    expect(call.status).toBe(404)
    expect(call.headers["access-control-allow-origin"]).toBe("https://dash.example")
    expect(call.headers["vary"]).toContain("Origin")
  })

  it("refuses another origin's preflight with no CORS header", async () => {
    const r = await raw(port, "OPTIONS", "/for_store/add_service", {
      headers: { origin: "https://dash.example.evil", "access-control-request-method": "POST" }
    })
    expect(r.status).toBe(403)
    expect(r.headers["access-control-allow-origin"]).toBeUndefined()
  })
})

describe("request bodies", () => {
  let server: TestServer
  let port: number
  beforeAll(async () => {
    server = await startTestServer({ options: { max_body_bytes: 4096 } })
    port = server.running.port
  })
  afterAll(() => server.cleanup())

  it.each([
    ["no content type", {}],
    ["text/plain", { "content-type": "text/plain" }],
    ["text/plain; charset=application/json", { "content-type": "text/plain; charset=application/json" }],
    ["a form", { "content-type": "application/x-www-form-urlencoded" }],
    ["multipart", { "content-type": "multipart/form-data; boundary=x" }],
    ["application/jsonx", { "content-type": "application/jsonx" }],
    ["application/json-seq", { "content-type": "application/json-seq" }]
  ])("refuses a body sent with %s (415), changing nothing", async (_what, headers) => {
    const before = server.readFileText()
    for (const path of ["/for_store/add_service", "/for_agent/a1/add_service", "/mcp"]) {
      const r = await raw(port, "POST", path, { headers, body: definition })
      expect(r.status, path).toBe(415)
      expect(r.body.error.code).toBe("UNSUPPORTED_MEDIA_TYPE")
    }
    expect(server.readFileText()).toBe(before)
  })

  it("refuses a non-JSON content type even with an empty body (what a no-cors page can send)", async () => {
    const r = await raw(port, "POST", "/for_store/reset_config", { headers: { "content-type": "text/plain;charset=UTF-8" }, body: "" })
    expect(r.status).toBe(415)
  })

  it("accepts application/json with parameters, in any case", async () => {
    for (const type of ["application/json; charset=utf-8", "Application/JSON", "application/json ; charset=UTF-8"]) {
      const r = await raw(port, "POST", "/for_store/call_tool", { headers: { "content-type": type }, body: JSON.stringify({ tool_name: "nope" }) })
      expect(r.status, type).toBe(404)
    }
  })

  it("refuses a body that is JSON but not an object (400), allowing arrays only where the contract takes them", async () => {
    const before = server.readFileText()
    for (const body of ['"x"', "1", "true", "null", "[]", '[{"tool_name":"x"}]']) {
      const r = await raw(port, "POST", "/for_store/call_tool", { headers: JSON_TYPE, body })
      expect(r.status, body).toBe(400)
      expect(r.body.error.details.fields[0].field).toBe("body")
    }
    for (const body of ['"x"', "7", "false", "null"]) {
      const r = await raw(port, "POST", "/for_store/add_service", { headers: JSON_TYPE, body })
      expect(r.status, body).toBe(400)
    }
    const list = await raw(port, "POST", "/for_store/add_service", { headers: JSON_TYPE, body: `[${definition}]` })
    expect(list.status).toBe(200)
    expect(server.readFile()).toMatchObject({ mcpServers: { added: { url: "http://127.0.0.1:9/mcp" } } })
    await server.del("/for_store/delete_service/added")
    expect(before).toBeTruthy()
  })

  it("takes a body of exactly the limit and refuses one byte more, by Content-Length, before reading it", async () => {
    const padded = (size: number) => {
      const base = JSON.stringify({ tool_name: "nope", args: { pad: "" } })
      return JSON.stringify({ tool_name: "nope", args: { pad: "x".repeat(size - base.length) } })
    }
    expect((await raw(port, "POST", "/for_store/call_tool", { headers: JSON_TYPE, body: padded(4096) })).status).toBe(404)
    const over = await raw(port, "POST", "/for_store/call_tool", { headers: JSON_TYPE, body: padded(4097) })
    expect(over.status).toBe(413)
    expect(over.body.error.details.limit).toBe(4096)
  })

  it("answers 413 to a chunked body as soon as it passes the limit, while the client is still sending", async () => {
    const answer = await new Promise<{ status: number; body: any; sentWhenAnswered: number; ended: boolean }>((resolve, reject) => {
      let sent = 0
      let ended = false
      const req = httpRequest(
        { host: "127.0.0.1", port, method: "POST", path: "/for_store/call_tool", headers: { ...JSON_TYPE, "transfer-encoding": "chunked" }, agent: false },
        (res) => {
          const sentWhenAnswered = sent
          const chunks: Buffer[] = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => {
            resolve({ status: res.statusCode ?? 0, body: JSON.parse(Buffer.concat(chunks).toString("utf8")), sentWhenAnswered, ended })
            req.destroy()
          })
        }
      )
      req.on("error", (e) => (sent > 0 ? undefined : reject(e)))
      // 1 KiB every 5 ms, up to 1 MiB: the 413 must come after about 4 KiB, long before the end.
      const timer = setInterval(() => {
        if (req.destroyed || sent >= 1024 * 1024) {
          clearInterval(timer)
          if (!req.destroyed) {
            ended = true
            req.end()
          }
          return
        }
        req.write("x".repeat(1024))
        sent += 1024
      }, 5)
    })
    expect(answer.status).toBe(413)
    expect(answer.body.error.code).toBe("PAYLOAD_TOO_LARGE")
    expect(answer.ended).toBe(false)
    expect(answer.sentWhenAnswered).toBeLessThan(256 * 1024)
    expect((await server.get("/health")).status).toBe(200)
  })
})

describe("answers", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(() => server.cleanup())

  it("sends a Content-Security-Policy and X-Frame-Options: DENY with the dashboard and the docs page", async () => {
    for (const path of ["/ui", "/docs"]) {
      const r = await server.get(path)
      expect(r.status).toBe(200)
      const policy = r.headers.get("content-security-policy") ?? ""
      expect(policy).toContain("default-src 'none'")
      expect(policy).toMatch(/script-src 'sha256-[A-Za-z0-9+/=]+'/)
      expect(policy).not.toContain("unsafe-eval")
      expect(policy).toContain("frame-ancestors 'none'")
      expect(r.headers.get("x-frame-options")).toBe("DENY")
    }
    expect((await server.get("/health")).headers.get("x-content-type-options")).toBe("nosniff")
  })

  it("keeps a failure's details (errno text, paths) in the log: the 500 body has a generic message and a trace id", async () => {
    const captured = captureLogs({ level: "debug" })
    const logged = captured.lines
    try {
      // The services file turns into a folder: writing it fails with EISDIR and its absolute path.
      rmSync(server.file)
      mkdirSync(server.file)
      const r = await server.post("/for_store/add_service", { name: "x", url: "http://127.0.0.1:9/mcp" })
      expect(r.status).toBe(500)
      expect(r.body.error.code).toBe("INTERNAL_ERROR")
      expect(r.text).not.toContain(server.dir)
      expect(r.text).not.toMatch(/EISDIR|ENOENT|errno/i)
      const traceId = r.body.error.details.trace_id as string
      expect(traceId).toMatch(/^[0-9a-f-]{36}$/)
      expect(r.body.message).toContain(traceId)
      const line = logged.find((l) => l.includes(traceId))
      expect(line).toBeDefined()
      expect(logged.join("\n")).toContain(server.dir)
    } finally {
      captured.restore()
    }
  })
})

describe("the connection cap", () => {
  let server: TestServer
  let port: number
  const sockets: Socket[] = []
  beforeAll(async () => {
    server = await startTestServer({ options: { max_connections: 4 } })
    port = server.running.port
  })
  afterAll(async () => {
    for (const s of sockets) s.destroy()
    await server.cleanup()
  })

  const open = () =>
    new Promise<Socket>((resolve, reject) => {
      const s = connect(port, "127.0.0.1", () => resolve(s))
      s.on("error", reject)
      sockets.push(s)
    })

  it("answers a connection past the cap 503 with Retry-After and closes it; a freed slot is usable again", async () => {
    const held = [await open(), await open(), await open(), await open()]
    const extra = await open()
    const answer = await new Promise<string>((resolve) => {
      let text = ""
      extra.on("data", (c: Buffer) => (text += c.toString("utf8")))
      extra.on("close", () => resolve(text))
      extra.write(`GET /health HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`)
    })
    expect(answer).toMatch(/^HTTP\/1\.1 503 /)
    expect(answer).toMatch(/retry-after: 1/i)
    expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4)).error.details.limit).toBe("max_connections")
    for (const s of held) s.destroy()
    await vi.waitFor(async () => expect((await raw(port, "GET", "/health")).status).toBe(200), { timeout: 5000 })
  })
})

describe("local services from the network", () => {
  const request = (address: string) => ({ remoteAddress: { _tag: "Some", value: address } }) as never
  const none = { _tag: "None" }
  it("are refused from a non-loopback client when the store has no API key, unless allowed", () => {
    const base = { localServices: true, apiKey: undefined, allowRemoteLocalServices: false }
    expect(localServicesPolicy(base, request("127.0.0.1"))).toBe("allowed")
    expect(localServicesPolicy(base, request("::1"))).toBe("allowed")
    expect(localServicesPolicy(base, request("::ffff:127.0.0.1"))).toBe("allowed")
    expect(localServicesPolicy(base, request("192.168.1.20"))).toBe("remote-client")
    expect(localServicesPolicy(base, { remoteAddress: none } as never)).toBe("remote-client")
    expect(localServicesPolicy({ ...base, apiKey: "k" }, request("192.168.1.20"))).toBe("allowed")
    expect(localServicesPolicy({ ...base, allowRemoteLocalServices: true }, request("192.168.1.20"))).toBe("allowed")
    expect(localServicesPolicy({ ...base, localServices: false }, request("127.0.0.1"))).toBe("disabled")
  })
})

describe("a local service from a remote client", () => {
  let server: TestServer
  beforeAll(async () => {
    server = await startTestServer()
  })
  afterAll(() => server.cleanup())

  it("is refused by the store with Forbidden (403 FORBIDDEN, saying how to allow it), changing nothing", async () => {
    const before = server.readFileText()
    const e = await server.running.store
      .forStore()
      .addService({ name: "p", command: "sh", args: ["-c", "exit 0"] }, { local: "remote-client" })
      .catch((err: unknown) => err)
    expect(e).toBeInstanceOf(Forbidden)
    const answer = fromStoreError(e as Forbidden)
    expect(answer.error.code).toBe("FORBIDDEN")
    expect(answer.message).toMatch(/--api-key/)
    expect(answer.message).toMatch(/--allow-remote-local-services/)
    expect(server.readFileText()).toBe(before)
    // A remote URL service is fine for the same caller.
    await server.running.store.forStore().addService({ name: "r", url: "http://127.0.0.1:9/mcp" }, { local: "remote-client" })
    expect(Object.keys((server.readFile() as { mcpServers: object }).mcpServers)).toEqual(["r"])
  })
})
