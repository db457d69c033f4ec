// The store against servers of both MCP eras, through its REST API: modern-only servers of the SDK
// v2 (test/fixtures/era-*.ts) over Streamable HTTP and stdio register, become healthy and show
// protocol_version 2026-07-28; their tools are listed and called (structured content, progress,
// time-outs); a tool list change is seen; a reconnection after a restart asks nothing again; pins
// that do not fit are permanent failures with a hint, unknown pins a 400; a 2025 server shows its version.
import { mkdtempSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { ProgressEvent } from "../../src/runtime/progress.js"
import { startEraHttpFixture, type EraHttpFixture } from "../fixtures/era-http.js"
import { eraStdio } from "../fixtures/paths.js"
import { eventually, firstText, localService, useTestServers } from "../support/index.js"

const servers = useTestServers({ httpFixture: true })

const lines = (file: string): Array<string> => readFileSync(file, "utf8").split("\n").filter((l) => l !== "")

describe("modern-only servers through the store", { timeout: 30_000 }, () => {
  let http: EraHttpFixture
  let dir: string
  beforeAll(async () => {
    http = await startEraHttpFixture()
    dir = mkdtempSync(join(tmpdir(), "eras-"))
  })
  afterAll(async () => {
    await http.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("register, become healthy at 2026-07-28, list and call tools, see tool list changes; a 2025 server shows its version", async () => {
    // New tools are taken at once: the test adds one upstream on purpose (held by default: test/extras/tool-pins.test.ts).
    const server = await servers.start({ monitoring: { health_check_seconds: 60 }, options: { pin_new_tools: "accept" } })
    const log = join(dir, "stdio.log")
    const added = await server.post("/for_store/add_service?wait=15", [
      { name: "modern", url: http.url },
      localService("local", eraStdio("reject", log)),
      { name: "old", url: servers.fixture.url }
    ])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy", "healthy"])

    const listed = (await server.get("/for_store/list_services")).body.services as Array<{ name: string; protocol_version: string | null }>
    expect(Object.fromEntries(listed.map((s) => [s.name, s.protocol_version]))).toEqual({ modern: "2026-07-28", local: "2026-07-28", old: "2025-11-25" })
    const info = await server.get("/for_store/get_service_info?name=modern")
    expect(info.body.service.protocol_version).toBe("2026-07-28")
    const status = await server.get("/for_store/service_status/local")
    expect(status.body.protocol_version).toBe("2026-07-28")
    expect(http.requests()).not.toContain("POST initialize")
    expect(lines(log)).not.toContain("initialize")

    const tools = ((await server.get("/for_store/list_tools")).body.tools as Array<{ name: string }>).map((t) => t.name)
    expect(tools).toEqual(expect.arrayContaining(["modern__echo", "modern__add", "local__echo", "local__count", "old__echo"]))

    for (const service of ["modern", "local"]) {
      const sum = await server.post("/for_store/call_tool", { tool_name: `${service}__add`, args: { a: 20, b: 22 } })
      expect(sum.status).toBe(200)
      expect(sum.body.structured_content).toEqual({ sum: 42 })
      expect(sum.body.is_error).toBe(false)
      expect(JSON.stringify(sum.body)).not.toContain("resultType")

      const progress: Array<ProgressEvent> = []
      const off = server.running.store.progress.on((e) => void progress.push(e))
      try {
        const counted = await server.post("/for_store/call_tool", { tool_name: `${service}__count`, args: { steps: 3, delay_ms: 150 } })
        expect(firstText(counted.body.content)).toBe("counted 3")
        expect(progress.filter((p) => p.service_name === service).length).toBeGreaterThan(0)
      } finally {
        off()
      }

      const slow = await server.post("/for_store/call_tool", { tool_name: `${service}__sleep`, args: { ms: 10_000 }, timeout: 0.5 })
      expect(slow.status).toBeGreaterThanOrEqual(400)
      expect(JSON.stringify(slow.body)).toMatch(/time/i)

      // The server's input_required: declined over REST without the opt-in; with it, answered in rounds.
      const asks = await server.post("/for_store/call_tool", { tool_name: `${service}__confirm` })
      expect(asks.status).toBe(502)
      expect(asks.text).toContain("mcp-store declined elicitation/create")
      const round = await server.post("/for_store/call_tool", { tool_name: `${service}__confirm`, accept_input_required: true })
      expect(round.body).toMatchObject({ result_type: "input_required", input_requests: { input_1: { method: "elicitation/create", params: { message: "Proceed (round 1)?" } } } })
      const confirmed = await server.post("/for_store/call_tool", {
        tool_name: `${service}__confirm`,
        request_state: round.body.request_state,
        input_responses: { input_1: { action: "accept", content: { ok: true } } }
      })
      expect(confirmed.body).toMatchObject({ result_type: "complete", result: "confirmed 1" })

      // The tool list changes: announced through subscriptions/listen, the store lists again.
      await server.post("/for_store/call_tool", { tool_name: `${service}__add_tool`, args: { name: `late_${service}` } })
      const seen = await eventually(
        async () => ((await server.get("/for_store/list_tools")).body.tools as Array<{ name: string }>).some((t) => t.name === `${service}__late_${service}`),
        5_000
      )
      expect(seen).toBe(true)
    }
    expect(await eventually(() => http.notes().includes("cancelled sleep"), 5_000)).toBe(true)
    expect(await eventually(() => lines(log).includes("cancelled sleep"), 5_000)).toBe(true)
  })

  it("reconnect after the server restarts with no extra negotiation round trip", async () => {
    const server = await servers.start()
    const log = join(dir, "restart.log")
    const added = await server.post("/for_store/add_service?wait=15", [{ name: "modern", url: http.url }, localService("local", eraStdio("reject", log))])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["healthy", "healthy"])
    const negotiation = (r: string) => r === "POST server/discover" || r === "POST initialize"

    // Streamable HTTP: the server stops (the store notices: its subscriptions/listen stream ends and
    // cannot be opened again), then comes back on the same port.
    const wait = (name: string, status: Array<string>) => server.post("/for_store/wait_service", { client_id_or_service_name: name, status, timeout: 10 })
    await http.stop()
    expect((await wait("modern", ["reconnecting"])).body.data.result).toBe(true)
    const from = http.requests().length
    await http.restart()
    expect((await wait("modern", ["healthy"])).body.data.result).toBe(true)
    const after = http.requests().slice(from)
    const firstList = after.indexOf("POST tools/list")
    expect(firstList).toBeGreaterThanOrEqual(0)
    expect(after.slice(0, firstList).filter(negotiation)).toEqual([])
    expect(after).not.toContain("POST initialize")

    // stdio: the process is killed; the new one is asked for its tools (and subscriptions) at once.
    const actor = server.running.store.forStore().findService("local")!
    const pid = actor.getSnapshot().context.connection?.pid
    expect(pid).toBeGreaterThan(0)
    const seen = lines(log).length
    process.kill(pid!, "SIGKILL")
    expect((await wait("local", ["reconnecting", "warning"])).body.data.result).toBe(true)
    expect((await wait("local", ["healthy"])).body.data.result).toBe(true)
    const fresh = lines(log).slice(seen)
    const listedAt = fresh.indexOf("tools/list")
    expect(listedAt).toBeGreaterThanOrEqual(0)
    expect(fresh.slice(0, listedAt).filter((m) => m === "server/discover" || m === "initialize")).toEqual([])
    expect(fresh).not.toContain("initialize")
    const listed = (await server.get("/for_store/list_services")).body.services as Array<{ protocol_version: string }>
    expect(listed.map((s) => s.protocol_version)).toEqual(["2026-07-28", "2026-07-28"])
  })

  it("a pin the server does not speak is a permanent failure with a hint naming both sides; an unknown pin is a 400", async () => {
    const server = await servers.start()
    const added = await server.post("/for_store/add_service?wait=15", [
      { name: "pinned", url: http.url, protocol_version: "2025-06-18" },
      { name: "modernpin", url: servers.fixture.url, protocol_version: "2026-07-28" }
    ])
    expect(added.body.services.map((s: { status: string }) => s.status)).toEqual(["unreachable", "unreachable"])
    const listed = (await server.get("/for_store/list_services")).body.services as Array<{ name: string; hint: string; last_error: string }>
    const pinned = listed.find((s) => s.name === "pinned")!
    expect(pinned.last_error).toMatch(/protocol version mismatch/)
    expect(pinned.hint).toContain("2026-07-28")
    expect(pinned.hint).toContain("2025-06-18")
    expect(listed.find((s) => s.name === "modernpin")!.hint).toMatch(/2025-era.*"protocol_version": "2026-07-28"/)

    const bad = await server.post("/for_store/add_service", { name: "bad", url: http.url, protocol_version: "2027-01-01" })
    expect(bad.status).toBe(400)
    expect(bad.body.error.code).toBe("VALIDATION_ERROR")
    expect(JSON.stringify(bad.body)).toContain("protocol_version")
    const names = ((await server.get("/for_store/list_services")).body.services as Array<{ name: string }>).map((s) => s.name)
    expect(names).not.toContain("bad")
  })
})
