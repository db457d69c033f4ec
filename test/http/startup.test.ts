// The start-up gap: the port is open before the store is built and the handler attached; a request
// that arrives then is answered 503 SERVICE_UNAVAILABLE with Retry-After, never left open.
import { request as httpRequest, createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { writeFileSync, rmSync } from "node:fs"
import { join } from "node:path"
import { afterEach, describe, expect, it } from "vitest"
import { resolveOptions } from "../../src/config/options.js"
import { answerWhileStarting, startServer, type RunningServer } from "../../src/http/server.js"
import { closedPort, freshDir, sampleEvery } from "../support/index.js"

interface Answer {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly body: any
  /** When the request was sent and its answer read (epoch ms). */
  readonly sentAt: number
  readonly receivedAt: number
}

/** One request on its own connection; rejects if it is not answered within `ms`. */
const ask = (port: number, method: string, path: string, body?: string, ms = 10_000): Promise<Answer> =>
  new Promise((resolve, reject) => {
    const sentAt = Date.now()
    const req = httpRequest(
      { host: "127.0.0.1", port, method, path, agent: false, headers: body === undefined ? {} : { "content-type": "application/json" } },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => (text += c))
        res.on("end", () => {
          clearTimeout(timer)
          resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text === "" ? undefined : JSON.parse(text), sentAt, receivedAt: Date.now() })
        })
      }
    )
    const timer = setTimeout(() => {
      req.destroy()
      reject(new Error(`${method} ${path}: no answer within ${ms} ms`))
    }, ms)
    req.on("error", (e) => {
      clearTimeout(timer)
      reject(e)
    })
    req.end(body)
  })

const expectStarting = (answer: Answer) => {
  expect(answer.status).toBe(503)
  expect(answer.headers["retry-after"]).toBe("1")
  expect(answer.headers["content-type"]).toMatch(/application\/json/)
  expect(answer.body).toMatchObject({ success: false, error: { code: "SERVICE_UNAVAILABLE", details: { status: "starting" } } })
  expect(answer.body.error.message).toBe(answer.body.message)
  // One second (the Retry-After) after the moment the answer was made, which lies between the request and its answer.
  const retryAt = Date.parse(answer.body.error.details.next_retry_at)
  expect(retryAt).toBeGreaterThanOrEqual(answer.sentAt + 1_000)
  expect(retryAt).toBeLessThanOrEqual(answer.receivedAt + 1_000)
}

describe("start-up gap", () => {
  const servers: Server[] = []
  afterEach(async () => {
    await Promise.all(servers.splice(0).map((s) => new Promise((r) => s.close(r))))
  })

  it("answers 503 with Retry-After until another request listener is attached, then steps aside", async () => {
    const server = createServer()
    servers.push(server)
    const remove = answerWhileStarting(server)
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
    const port = (server.address() as AddressInfo).port

    expectStarting(await ask(port, "GET", "/for_store/health"))
    expectStarting(await ask(port, "POST", "/for_store/call_tool", JSON.stringify({ tool_name: "x" })))

    // The real handler attached: it alone answers.
    server.on("request", (_req, res) => res.end("ready"))
    const ready = await new Promise<string>((resolve, reject) => {
      httpRequest({ host: "127.0.0.1", port, path: "/x", agent: false }, (res) => {
        let text = ""
        res.on("data", (c) => (text += c))
        res.on("end", () => resolve(`${res.statusCode} ${text}`))
      })
        .on("error", reject)
        .end()
    })
    expect(ready).toBe("200 ready")
    remove()
    expect(server.listenerCount("request")).toBe(1)
  })

  it("a request sent while a server with many services starts is answered (503, then 200), none is left open", { timeout: 60_000 }, async () => {
    const dir = freshDir()
    const dead = await closedPort()
    // Many services make the store's build (and so the gap) long enough to be hit.
    const mcpServers = Object.fromEntries(Array.from({ length: 300 }, (_, i) => [`svc${i}`, { url: `http://127.0.0.1:${dead}/mcp` }]))
    const file = join(dir, "mcp.json")
    writeFileSync(file, JSON.stringify({ mcpServers }))
    const port = await closedPort()
    const resolved = resolveOptions({ host: "127.0.0.1", port, show_startup_info: false, log_level: "error", mcp_config_file: file })
    let running: RunningServer | undefined
    let startError: unknown
    const starting = startServer({ server: resolved.server, store: resolved.store, graceMs: 200 }).then(
      (r) => (running = r),
      (e) => (startError = e)
    )
    const answers: Array<Promise<Answer>> = []
    try {
      // Probe every 5 ms from before the port opens until the server has started.
      const probe = sampleEvery(5, () => {
        if (running !== undefined || startError !== undefined) return
        answers.push(ask(port, "GET", "/for_store/health").catch((e: Error) => (e.message.includes("ECONNREFUSED") ? ({ status: 0 } as Answer) : Promise.reject(e))))
      })
      await starting
      await probe.stop()
      expect(startError).toBeUndefined()
      const all = await Promise.all(answers)
      const answered = all.filter((a) => a.status !== 0)
      for (const a of answered) {
        if (a.status === 503) expectStarting(a)
        else expect(a.status).toBe(200)
      }
      // Once started, the real handler answers.
      expect((await ask(port, "GET", "/for_store/health")).status).toBe(200)
    } finally {
      await starting
      await running?.close()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
