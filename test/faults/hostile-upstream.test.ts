// A hostile or broken upstream must not take the store down. Against the
// hand-written servers of test/fixtures/hostile-upstream.ts and hostile-stdio.ts, with a 1 MiB
// message limit and 64 MiB answers streamed with back-pressure:
// - one message over the limit (a Streamable HTTP JSON body or event, a legacy SSE event, a stdio
//   line, an initialize answer) fails that call with 502 UPSTREAM_ERROR, outcome message_too_large,
//   the reading stops (the server could send only a little), the store's RSS stays well under what
//   unbounded reading would take, /health answers throughout, and the service reconnects;
// - a call that times out stops its HTTP request;
// - tool schemas with a catastrophic pattern are checked in linear time (/health stays under 50 ms);
// - in a store process, a saved definition whose server breaks initialize does not stop the start,
//   and an uncaught exception or unhandled rejection from a service's code path is logged with
//   the service's name while the store keeps serving.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import type { ServiceActorRef } from "../../src/machines/service.js"
import {
  HUGE_BYTES,
  REDOS_INPUT,
  startHostileHttpServer,
  startHostileSseServer,
  type HostileServer
} from "../fixtures/hostile-upstream.js"
import { REPO_ROOT } from "../fixtures/paths.js"
import { captureLogs } from "../../src/logging/log.js"
import { LIST_CHANGED_SPACING_MS } from "../../src/runtime/adapter.js"
import {
  eventually,
  quietFor,
  FAULT_MONITORING,
  localService,
  programArgs,
  recordStatuses,
  rssOf,
  sampleEvery,
  spawnStore,
  startTestServer,
  type Api,
  type Reply,
  type StatusLog,
  type StoreProcess,
  type TestServer
} from "../support/index.js"

const MiB = 1024 * 1024
/** The store's message limit in these tests. */
const LIMIT = 1 * MiB
/**
 * What the store may grow by, at most, while a 64 MiB message arrives: the limit, socket and parser
 * buffers, the ordinary churn of a running store, and what a loaded machine's lazy garbage
 * collection leaves uncollected for a while. Reading the message whole would take well over 64 MiB
 * (the text, then its parse).
 */
const RSS_BUDGET = 40 * MiB
/** What a server may get out before the store stops reading: the limit plus the sockets' buffers. */
const SENT_BUDGET = 16 * MiB

const hostileStdio = (name: string) =>
  localService(name, { command: process.execPath, args: programArgs(join(REPO_ROOT, "test", "fixtures", "hostile-stdio.ts")) })

/** The store of the running test. */
let server: TestServer | undefined
let hostile: HostileServer | undefined
let log: StatusLog | undefined
/**
 * The store with the settings below (`startStore`), shared by the tests that use it: starting and
 * ending one took about as much CPU as the rest of such a test. Each of them adds its own service
 * (`addedService`), which `afterEach` deletes with its connection and process, so the next test finds the
 * store as the first did, with no service; what a deleted service leaves (its tool records) is read
 * by service name, newest first, and the record a test reads is its own call's, the newest.
 */
let shared: TestServer | undefined
/** The service the running test added to the shared store. */
let addedService: string | undefined

afterEach(async () => {
  log?.stop()
  if (server !== undefined && server !== shared) await server.cleanup()
  else if (addedService !== undefined && shared !== undefined) {
    const deleted = await shared.del(`/for_store/delete_service/${encodeURIComponent(addedService)}`).catch(() => undefined)
    // Not deleted (a test that failed half-way): the next test gets a store of its own.
    if (deleted?.status !== 200 || shared.running.store.forStore().listServices().length > 0) {
      await shared.cleanup()
      shared = undefined
    }
  }
  await hostile?.stop()
  server = hostile = log = addedService = undefined
}, 20_000)
afterAll(async () => {
  await shared?.cleanup()
  shared = undefined
}, 20_000)

/**
 * The fault monitoring settings with reconnection attempts 0.3 s apart (1 s in FAULT_MONITORING):
 * the tests wait for a service to come back after an oversize message, or for the next attempt.
 */
const MONITORING = { ...FAULT_MONITORING, reconnection_seconds: 0.3 }

/** The shared store (started on first use) with the 1 MiB limit and the monitoring settings above; `name` is the service the test will add to it. */
const startStore = async (name: string): Promise<TestServer> => {
  shared ??= await startTestServer({ monitoring: MONITORING, options: { max_message_bytes: LIMIT } })
  addedService = name
  return shared
}

/** Takes the shared store, adds `definition`, waits until it is healthy, and records its statuses from then on. */
const healthyService = async (definition: Record<string, unknown>): Promise<ServiceActorRef> => {
  server = await startStore(String(definition["name"]))
  const reply = await server.post("/for_store/add_service?wait=15", definition)
  expect(reply.status, reply.text).toBe(200)
  expect(reply.body.services[0].status, reply.text).toBe("healthy")
  const actor = server.running.store.forStore().findService(String(definition["name"]))!
  log = recordStatuses(actor)
  return actor
}

/** The service still answers on the same connection: an echo after, and no reconnection. */
const goesOn = async (service: string): Promise<void> => {
  const echo = await server!.post("/for_store/call_tool", { tool_name: `${service}__echo`, args: { text: "after" } })
  expect(echo.status, echo.text).toBe(200)
  expect(log!.transitions.filter((t) => t.to === "reconnecting")).toEqual([])
}

/**
 * GET /health, one after the other (5 ms apart), until stopped: every latency, and how many did not
 * answer 200. `answered(n)` resolves once `n` more have been answered than when it was called.
 */
const watchHealth = (api: Api) => {
  const latencies: number[] = []
  let failures = 0
  const sampler = sampleEvery(5, async () => {
    const started = performance.now()
    const reply = await api.get("/health").catch(() => undefined)
    latencies.push(performance.now() - started)
    if (reply?.status !== 200) failures += 1
  })
  return {
    answered: async (n = 1) => {
      const target = latencies.length + n
      expect(await eventually(() => latencies.length >= target, 5_000, 1)).toBe(true)
    },
    stop: async () => {
      await sampler.stop()
      return { count: latencies.length, failures }
    }
  }
}

/** Runs `work` while sampling this process's RSS every 5 ms; the peak growth over the start. */
const rssGrowthDuring = async <T>(pid: number, work: () => Promise<T>): Promise<{ value: T; growth: number }> => {
  const start = rssOf(pid)!
  let peak = start
  const timer = setInterval(() => (peak = Math.max(peak, rssOf(pid) ?? 0)), 5)
  try {
    const value = await work()
    peak = Math.max(peak, rssOf(pid) ?? 0)
    return { value, growth: peak - start }
  } finally {
    clearInterval(timer)
  }
}

/** A call through the store's API while /health is watched and RSS sampled; checks both afterwards. */
const callWatched = async (toolName: string) => {
  const health = watchHealth(server!)
  const { value: reply, growth } = await rssGrowthDuring(process.pid, () => server!.post("/for_store/call_tool", { tool_name: toolName, args: {} }))
  const seen = await health.stop()
  expect(seen.failures, "every /health during the call answered 200").toBe(0)
  expect(seen.count).toBeGreaterThan(0)
  expect(growth, `RSS grew by ${(growth / MiB).toFixed(1)} MiB`).toBeLessThan(RSS_BUDGET)
  return reply
}

/** The checks every oversize call shares: 502 message_too_large, a record, reconnecting, then healthy again. */
const expectTooLarge = async (reply: Reply, service: string, tool: string) => {
  expect(reply.status, reply.text).toBe(502)
  expect(reply.body.error.code).toBe("UPSTREAM_ERROR")
  expect(reply.body.error.details).toMatchObject({ outcome: "message_too_large", service_name: service })
  expect(reply.body.error.message).toMatch(/larger than the 1048576-byte message limit/)
  expect(await log!.waitFor("reconnecting", 5_000)).toBe(true)
  expect(log!.transitions.find((t) => t.to === "reconnecting")!.reason).toMatch(/message too large/)
  const records = await server!.get(`/for_store/tool_records?service_name=${service}`)
  expect(records.body.executions[0]).toMatchObject({ tool_name: tool, outcome: "message_too_large" })
  // It comes back by itself (the server behaves until asked for a huge answer again).
  expect(await log!.waitFor("healthy", 10_000)).toBe(true)
  const echo = await server!.post("/for_store/call_tool", { tool_name: `${service}__echo`, args: { text: "still here" } })
  expect(echo.status, echo.text).toBe(200)
}

/** How much a huge answer got out before the store stopped reading it. */
const expectCutOff = async (answer: Promise<{ written: number; complete: boolean }> | undefined) => {
  expect(answer).toBeDefined()
  const sent = await answer!
  expect(sent.complete).toBe(false)
  expect(sent.written).toBeGreaterThan(LIMIT)
  expect(sent.written, `the server got ${(sent.written / MiB).toFixed(1)} MiB out`).toBeLessThan(SENT_BUDGET)
}

describe("one upstream message over --max-message-bytes", () => {
  it("a Streamable HTTP JSON body: 502 message_too_large, reading stops, the service reconnects", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const reply = await callWatched("hostile__huge_json")
    await expectCutOff(hostile.hugeAnswers[0])
    await expectTooLarge(reply, "hostile", "huge_json")
    expect(hostile.connections()).toBeGreaterThanOrEqual(2)
  })

  it("one event of a Streamable HTTP event stream: the same", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const reply = await callWatched("hostile__huge_event")
    await expectCutOff(hostile.hugeAnswers[0])
    await expectTooLarge(reply, "hostile", "huge_event")
  })

  it("one event of a legacy SSE stream: the same", { timeout: 20_000 }, async () => {
    hostile = await startHostileSseServer()
    await healthyService({ name: "legacy", url: hostile.url })
    const reply = await callWatched("legacy__huge_event")
    await expectCutOff(hostile.hugeAnswers[0])
    await expectTooLarge(reply, "legacy", "huge_event")
    expect(hostile.connections()).toBeGreaterThanOrEqual(2)
  })

  it("one stdio line: the same, and the process is ended", { timeout: 20_000 }, async () => {
    const actor = await healthyService(hostileStdio("local"))
    const pid = actor.getSnapshot().context.connection!.pid!
    const reply = await callWatched("local__huge_line")
    await expectTooLarge(reply, "local", "huge_line")
    expect(actor.getSnapshot().context.connection!.pid).not.toBe(pid)
    expect(await eventually(() => rssOf(pid) === undefined, 5_000)).toBe(true)
  })

  it("an initialize answer: the connect fails, the store stays up and keeps retrying", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer({ hugeInitialize: true })
    server = await startStore("breaks_init")
    const health = watchHealth(server)
    const { value: added, growth } = await rssGrowthDuring(process.pid, () =>
      server!.post("/for_store/add_service?wait=10", { name: "breaks_init", url: hostile!.url })
    )
    expect(added.status, added.text).toBe(200)
    expect(added.body.services[0].status).toBe("reconnecting")
    const actor = server.running.store.forStore().findService("breaks_init")!
    expect(actor.getSnapshot().context.lastError).toMatch(/larger than the 1048576-byte message limit/)
    await expectCutOff(hostile.hugeAnswers[0])
    // The next attempt (0.3 s later) meets the same answer and is cut off the same way.
    expect(await eventually(() => hostile!.hugeAnswers.length >= 2, 5_000)).toBe(true)
    await expectCutOff(hostile.hugeAnswers[1])
    const seen = await health.stop()
    expect(seen.failures).toBe(0)
    expect(growth, `RSS grew by ${(growth / MiB).toFixed(1)} MiB`).toBeLessThan(RSS_BUDGET)
  })

  it("an error answer's body: at most 2,000 characters are read and kept", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const reply = await callWatched("hostile__huge_error")
    expect(reply.status, reply.text).toBe(502)
    expect(reply.body.error.details.outcome).toBe("transport_error")
    expect(reply.body.error.message).toMatch(/HTTP 500/)
    expect(reply.body.error.message.length).toBeLessThan(2_500)
    const sent = await hostile.hugeAnswers[0]!
    expect(sent.complete).toBe(false)
    expect(sent.written).toBeLessThan(SENT_BUDGET)
  })

  it("a call that times out destroys its HTTP request: the server sees the answer cut off", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const reply = await server!.post("/for_store/call_tool", { tool_name: "hostile__slow_json", args: {}, timeout: 0.5 })
    expect(reply.status, reply.text).toBe(504)
    // Cut off at the time-out, not read on for ever.
    const sent = await hostile.hugeAnswers[0]!
    expect(sent.complete).toBe(false)
  })
})

describe("an answer nested thousands deep", () => {
  it("fails its call as a protocol error, never a call left without its answer; the connection goes on", { timeout: 30_000 }, async () => {
    await healthyService(hostileStdio("deep"))
    const reply = await server!.post("/for_store/call_tool", { tool_name: "deep__deep_result", args: {}, timeout: 10 })
    expect(reply.status, reply.text).toBe(502)
    expect(reply.body.error.details.outcome).toBe("protocol_error")
    expect(reply.body.error.message).toMatch(/nested deeper than 128 levels/)
    await goesOn("deep")
  })
})

describe("a flood of the server's own requests", () => {
  it("is cut: some are dropped unanswered, with a warning; the service goes on", { timeout: 30_000 }, async () => {
    const logs = captureLogs({ level: "warning", format: "json" })
    try {
      await healthyService(hostileStdio("flood"))
      const reply = await server!.post("/for_store/call_tool", { tool_name: "flood__ping_flood", args: {} })
      expect(reply.status, reply.text).toBe(200)
      // At most 256 are handled at once (test/mcp/request-flood.test.ts). The 1,000 may come in
      // several reads, each after the answers of the one before were written: 256 a read at most.
      // (Those answered within the fixture's half second: on a loaded machine fewer than 256.)
      const pongs = Number(reply.body.result)
      expect(pongs).toBeGreaterThan(0)
      expect(pongs).toBeLessThan(1_000)
      const floods = logs.lines.filter((l) => l.includes('"request_flood"'))
      expect(floods.length).toBeGreaterThanOrEqual(1)
      expect(floods[0]).toMatch(/service store\/flood: the server sent more than 256 requests that are not answered yet/)
      expect(JSON.parse(floods[0]!)).toMatchObject({ service: "store/flood" })
    } finally {
      logs.restore()
    }
    await goesOn("flood")
  })
})

describe("an answer that is not a valid message", () => {
  it("fails its call at once as a protocol error saying what came, not at its time-out; the connection goes on", { timeout: 30_000 }, async () => {
    await healthyService(hostileStdio("malformed"))
    const reply = await server!.post("/for_store/call_tool", { tool_name: "malformed__bad_error", args: {}, timeout: 10 })
    expect(reply.status, reply.text).toBe(502)
    expect(reply.body.error.details.outcome).toBe("protocol_error")
    expect(reply.body.error.message).toMatch(/not a valid message: .*"error":"boom"/)
    await goesOn("malformed")
  })
})

describe("a server that announces a changed list after every list", () => {
  it("is listed again at most once a second, not in a loop; its changes still arrive", { timeout: 30_000 }, async () => {
    const storm = hostileStdio("storm")
    server = await startStore("storm")
    const reply = await server.post("/for_store/add_service?wait=15", { ...storm, args: [...storm.args, "relist_storm"] })
    expect(reply.status, reply.text).toBe(200)
    const lists = async () => Number((await server!.post("/for_store/call_tool", { tool_name: "storm__list_count", args: {} })).body.result)
    // Its first notice comes 0.3 s after the connect's list; each later one at once after each list.
    expect(await eventually(async () => (await lists()) >= 2, 5_000)).toBe(true)
    const started = performance.now()
    const before = await lists()
    await quietFor(2_000)
    const after = await lists()
    const seconds = (performance.now() - started) / 1_000
    // Spaced: a loop would list hundreds of times a second. And still followed: it lists again.
    expect(after - before, `${after - before} lists in ${seconds.toFixed(1)} s`).toBeLessThanOrEqual(Math.floor(seconds / (LIST_CHANGED_SPACING_MS / 1_000)) + 1)
    expect(await eventually(async () => (await lists()) > after, 5_000)).toBe(true)
  })
})

describe("a server whose event stream ends as soon as it opens, asking a retry delay", () => {
  it.each([
    ["0 ms", 0],
    ["more than a timer holds", 10 ** 13]
  ])("%s: the stream is reopened at most once a second, not in a loop; the service stays connected", { timeout: 30_000 }, async (_name, retry) => {
    hostile = await startHostileHttpServer({ restlessStream: retry })
    await healthyService({ name: "restless", url: hostile.url })
    const started = performance.now()
    const before = hostile.streams()
    await quietFor(2_000)
    const opened = hostile.streams() - before
    const seconds = (performance.now() - started) / 1_000
    expect(opened, `${opened} streams in ${seconds.toFixed(1)} s`).toBeLessThanOrEqual(Math.floor(seconds) + 1)
    // (A slow check on a loaded machine may show `warning`; the stream never takes the service down.)
    expect(log!.transitions.filter((t) => t.to === "reconnecting" || t.to === "unreachable")).toEqual([])
  })
})

describe("a server that stops reading its input", () => {
  it("gets at most --max-message-bytes waiting for it: a call past that fails at once, and the service is started again", { timeout: 30_000 }, async () => {
    await healthyService(hostileStdio("deaf"))
    const stop = await server!.post("/for_store/call_tool", { tool_name: "deaf__stop_reading", args: {} })
    expect(stop.status, stop.text).toBe(200)
    // 3 x 600 KiB against a 1 MiB bound (and a pipe of some 64 KiB): the third finds more than 1 MiB waiting.
    const text = "x".repeat(600 * 1024)
    const replies = await Promise.all([1, 2, 3].map(() => server!.post("/for_store/call_tool", { tool_name: "deaf__echo", args: { text }, timeout: 5 })))
    const refused = replies.filter((r) => /does not read its input/.test(r.text))
    expect(refused.length, replies.map((r) => r.text.slice(0, 300)).join("\n")).toBeGreaterThanOrEqual(1)
    for (const reply of refused) {
      expect(reply.status).toBe(502)
      expect(reply.body.error.details.outcome).toBe("transport_error")
    }
    // Its health checks fail the same way: the process is ended and another started, which reads.
    expect(await eventually(() => log!.transitions.some((t) => t.to === "reconnecting"), 15_000)).toBe(true)
    const healthy = await server!.post("/for_store/wait_service", { client_id_or_service_name: "deaf", status: "healthy", timeout: 15 })
    expect(healthy.status, healthy.text).toBe(200)
    const echo = await server!.post("/for_store/call_tool", { tool_name: "deaf__echo", args: { text: "after" } })
    expect(echo.status, echo.text).toBe(200)
  })
})

describe("tool names with a control character", () => {
  it("are left out of the service's tools, with one warning per list naming them", { timeout: 30_000 }, async () => {
    const logs = captureLogs({ level: "warning", format: "json" })
    try {
      await healthyService(hostileStdio("odd"))
      const listed = await server!.get("/for_store/list_tools?service_name=odd")
      expect(listed.status, listed.text).toBe(200)
      const names = (listed.body.tools as Array<{ name: string }>).map((t) => t.name)
      expect(names).toContain("odd__echo")
      expect(names.filter((n) => /[\u0000-\u001f]/.test(n))).toEqual([])
      const rejected = logs.lines.filter((l) => l.includes('"tool_rejected"'))
      expect(rejected).toHaveLength(1)
      for (const name of ["\u0000definition", "two\nlines"]) expect(rejected[0]).toContain(JSON.stringify(JSON.stringify(name)).slice(1, -1))
      expect(JSON.parse(rejected[0]!)).toMatchObject({ count: 2, service: "store/odd" })
    } finally {
      logs.restore()
    }
  })
})

describe("a list that never ends", () => {
  it("is refused once its pages bring more than 64 MiB, long before the page cap; the service says why", { timeout: 60_000 }, async () => {
    // A connect may take its time on a loaded machine: 64 MiB of pages are parsed before the bound stops them.
    server = await startTestServer({ monitoring: { ...MONITORING, initialization_timeout_seconds: 25 }, options: { max_message_bytes: LIMIT } })
    const endless = hostileStdio("endless")
    const { growth, value: added } = await rssGrowthDuring(process.pid, () => server!.post("/for_store/add_service?wait=30", { ...endless, args: [...endless.args, "endless_tools"] }))
    expect(added.status, added.text).toBe(200)
    const info = await server.get("/for_store/get_service_info?name=endless")
    expect(info.text).toMatch(/tools\/list: its pages bring more than 64 MiB/)
    expect(info.body.service.status, info.text).not.toBe("healthy")
    // 1,000 pages of 512 KiB would be half a gigabyte of text, and more once parsed.
    expect(growth, `RSS grew by ${(growth / MiB).toFixed(1)} MiB`).toBeLessThan(400 * MiB)
  })
})

describe("tool schemas from an upstream are checked in linear time", () => {
  it("a ReDoS pattern: 400 INVALID_ARGUMENTS at once, /health answered between the calls", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    // Warm up: the first /health and call pay for code loading, not for the pattern.
    await server!.get("/health")
    await server!.post("/for_store/call_tool", { tool_name: "hostile__redos", args: { s: "aaaa" } })
    const round = async () => {
      const health = watchHealth(server!)
      await health.answered()
      const replies: Array<Reply> = []
      for (let i = 0; i < 5; i++) {
        replies.push(await server!.post("/for_store/call_tool", { tool_name: "hostile__redos", args: { s: REDOS_INPUT } }))
        // /health between calls: the pattern does not hold the event loop after the answer either.
        await health.answered()
      }
      return { replies, seen: await health.stop() }
    }
    // Backtracking on this input holds the event loop for a minute: the calls and the /health
    // answers between them would not come within the test's time-out.
    const { replies, seen } = await round()
    for (const reply of replies) {
      expect(reply.status, reply.text).toBe(400)
      expect(reply.body.error.code).toBe("INVALID_ARGUMENTS")
      expect(JSON.stringify(reply.body.error.details)).toContain("args.s")
    }
    expect(seen.failures).toBe(0)
    expect(seen.count).toBeGreaterThanOrEqual(5)
    // A value the pattern accepts goes through.
    const good = await server!.post("/for_store/call_tool", { tool_name: "hostile__redos", args: { s: "aaaa" } })
    expect(good.status, good.text).toBe(200)
  })

  it("a pattern RE2 cannot run (a backreference) is left to the upstream, never a 500", async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const reply = await server!.post("/for_store/call_tool", { tool_name: "hostile__backref", args: { s: "ab" } })
    expect(reply.status, reply.text).toBe(200)
    // The rest of the schema is still checked.
    const missing = await server!.post("/for_store/call_tool", { tool_name: "hostile__backref", args: {} })
    expect(missing.status, missing.text).toBe(400)
  })

  it("the SDK client's check of structured output against an output schema is linear too", { timeout: 20_000 }, async () => {
    hostile = await startHostileHttpServer()
    await healthyService({ name: "hostile", url: hostile.url })
    const health = watchHealth(server!)
    // Backtracking on this output would hold the event loop for a minute: the test's time-out.
    const reply = await server!.post("/for_store/call_tool", { tool_name: "hostile__redos_output", args: {} })
    const seen = await health.stop()
    // The output does not match its schema: refused (the SDK says so as -32602).
    expect([400, 502], reply.text).toContain(reply.status)
    expect(reply.text).toMatch(/does not match the tool's output schema/)
    expect(seen.failures).toBe(0)
  })
})

describe("a store process", () => {
  /** In the store's process only: the hostile stdio server's markers make the store's own parse of
   * its answer throw outside any try (an exception on the next tick, a rejection nobody handles). */
  const INJECT = `data:text/javascript,${encodeURIComponent(`
const parse = JSON.parse;
JSON.parse = function (text, reviver) {
  if (typeof text === "string" && text.includes("__mcp_store_test_uncaught__")) process.nextTick(() => { throw new Error("injected uncaught exception"); });
  if (typeof text === "string" && text.includes("__mcp_store_test_rejection__")) Promise.reject(new Error("injected unhandled rejection"));
  return parse.call(this, text, reviver);
};
`)}`

  let dir: string
  let store: StoreProcess
  let breaksInit: HostileServer

  beforeAll(async () => {
    breaksInit = await startHostileHttpServer({ hugeInitialize: true })
    dir = mkdtempSync(join(tmpdir(), "mcp-store-hostile-"))
    const configFile = join(dir, "mcp.json")
    const { name: _, ...local } = hostileStdio("local")
    writeFileSync(configFile, JSON.stringify({ mcpServers: { breaks_init: { url: breaksInit.url }, local } }))
    store = await spawnStore({
      configFile,
      monitoring: MONITORING,
      extraArgs: ["--max-message-bytes", String(LIMIT)],
      nodeArgs: ["--import", INJECT]
    })
  }, 40_000)

  afterAll(async () => {
    await store?.kill()
    await breaksInit?.stop()
    rmSync(dir, { recursive: true, force: true })
  })

  it("starts with a saved service whose initialize answer is huge, and keeps serving while it retries", { timeout: 20_000 }, async () => {
    const start = rssOf(store.pid)!
    let peak = start
    const health = watchHealth(store)
    // Three attempts, each cut off at the limit.
    const attempts = await eventually(async () => {
      peak = Math.max(peak, rssOf(store.pid) ?? 0)
      return breaksInit.hugeAnswers.length >= 3
    }, 15_000)
    expect(attempts).toBe(true)
    for (const answer of breaksInit.hugeAnswers.slice(0, 3)) await expectCutOff(answer)
    const seen = await health.stop()
    expect(seen.failures).toBe(0)
    const info = await store.get("/for_store/get_service_info?name=breaks_init")
    expect(["reconnecting", "unreachable", "initializing"]).toContain(info.body.service.status)
    expect(peak - start, `RSS grew by ${((peak - start) / MiB).toFixed(1)} MiB`).toBeLessThan(RSS_BUDGET)
    expect(store.output()).not.toMatch(/RangeError|heap out of memory/)
  })

  it("logs an uncaught exception and an unhandled rejection from a service's code path, with its name, and keeps serving", { timeout: 20_000 }, async () => {
    const ready = await store.post("/for_store/wait_service", { client_id_or_service_name: "local", status: "healthy", timeout: 15 })
    expect(ready.body.success, ready.text).toBe(true)
    const thrown = await store.post("/for_store/call_tool", { tool_name: "local__marker_uncaught", args: {} })
    expect(thrown.status, thrown.text).toBe(200)
    expect(await eventually(() => store.output().includes("injected uncaught exception"), 5_000)).toBe(true)
    expect(store.output()).toMatch(/uncaught exception in service 'local'; the store keeps serving: injected uncaught exception/)
    const rejected = await store.post("/for_store/call_tool", { tool_name: "local__marker_rejection", args: {} })
    expect(rejected.status, rejected.text).toBe(200)
    expect(await eventually(() => store.output().includes("injected unhandled rejection"), 5_000)).toBe(true)
    expect(store.output()).toMatch(/unhandled promise rejection in service 'local'; the store keeps serving: injected unhandled rejection/)
    for (let i = 0; i < 3; i++) expect((await store.get("/health")).status).toBe(200)
    const again = await store.post("/for_store/call_tool", { tool_name: "local__echo", args: { text: "alive" } })
    expect(again.status, again.text).toBe(200)
    expect(store.child.exitCode).toBe(null)
  })
})
