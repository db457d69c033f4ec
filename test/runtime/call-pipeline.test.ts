// The call pipeline of src/runtime/calls.ts without HTTP: target resolution (found, wait for a
// service still connecting, refused), the argument check, the request on the service's connection
// (src/runtime/service-request.ts: an expired session sent once more), the one failure classification of
// src/runtime/failures.ts (calls and catalog), record outcomes, cancellation; against real stdio
// fixture servers in a store in the test's process.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { rmSync } from "node:fs"
import { join } from "node:path"
import { Cause, Effect, Exit, Fiber, Option } from "effect"
import { McpRequestError } from "../../src/mcp/types.js"
import { Cancel } from "../../src/domain/cancellation.js"
import { callOutcome, resolveTarget, runCall, type CallExit } from "../../src/runtime/calls.js"
import { outcomeOf, requestFailure, taskRequestFailure } from "../../src/runtime/failures.js"
import { ClusterUnavailable, TooMany } from "../../src/domain/errors.js"
import { AsyncCalls } from "../../src/runtime/async-calls.js"
import { NotConnected, requestOnService } from "../../src/runtime/service-request.js"
import { createStore } from "../../src/composition/layer-graph.js"
import type { Store } from "../../src/runtime/store.js"
import { eventually, FAST_MONITORING, fixtureService, freshDir, localService } from "../support/index.js"

const failureTag = (exit: CallExit): string | undefined => {
  if (Exit.isSuccess(exit)) return undefined
  return Option.getOrUndefined(Option.map(Cause.failureOption(exit.cause), (e) => e._tag))
}

describe("the call pipeline", { timeout: 20_000 }, () => {
  let dir: string
  let store: Store

  beforeAll(async () => {
    dir = freshDir()
    store = await createStore({ mcpConfigFile: join(dir, "mcp.json"), monitoring: FAST_MONITORING })
    const api = store.forStore()
    await api.addService(fixtureService("one"), { waitSeconds: 10 })
    await api.addService(fixtureService("two"), { waitSeconds: 10 })
    // A process that never answers initialize: the service stays `initializing` through the tests.
    await api.addService(localService("mute", { command: process.execPath, args: ["-e", "setInterval(() => {}, 1000)"] }))
  }, 30_000)
  afterAll(async () => {
    await store?.stop()
    rmSync(dir, { recursive: true, force: true })
  }, 15_000)

  const ctx = () => store.forStore().effects
  const recordOf = async (spanId: string) =>
    (await store.forStore().toolRecords({ limit: 200, offset: 0 })).executions.find((r) => r.span_id === spanId)
  const lastRecord = async (tool: string) => (await store.forStore().toolRecords({ limit: 1, offset: 0, tool_name: tool })).executions[0]

  describe("target resolution", () => {
    const resolve = (input: Parameters<typeof resolveTarget>[1], expired = false) => resolveTarget(ctx(), input, { expired, timeoutSeconds: 5 })

    it("finds a callable name's service and the tool's own name", () => {
      const target = resolve({ tool_name: "one__add" })
      expect(target._tag).toBe("Found")
      if (target._tag === "Found") {
        expect(target.actor.getSnapshot().context.name).toBe("one")
        expect(target.original).toBe("add")
      }
    })

    it("an original name two services offer is refused as ambiguous; service_name picks one", () => {
      const ambiguous = resolve({ tool_name: "echo" })
      expect(ambiguous).toMatchObject({ _tag: "Refused", error: { _tag: "AmbiguousTool", candidates: ["one__echo", "two__echo"] } })
      const picked = resolve({ tool_name: "echo", service_name: "two" })
      expect(picked._tag === "Found" && picked.actor.getSnapshot().context.name).toBe("two")
    })

    it("refuses an unknown tool with suggestions, and an unknown service_name", () => {
      expect(resolve({ tool_name: "one__addd" })).toMatchObject({ _tag: "Refused", error: { _tag: "ToolNotFound", suggestions: expect.arrayContaining(["one__add"]) } })
      expect(resolve({ tool_name: "add", service_name: "ghost" })).toMatchObject({ _tag: "Refused", error: { _tag: "ServiceNotFound" } })
    })

    it("waits for a named service still connecting; past the deadline that is a time-out", () => {
      const waiting = resolve({ tool_name: "mute__anything" })
      expect(waiting._tag).toBe("Wait")
      if (waiting._tag === "Wait") expect(waiting.pending.map((a) => a.getSnapshot().context.name)).toEqual(["mute"])
      expect(resolve({ tool_name: "mute__anything" }, true)).toMatchObject({ _tag: "Refused", error: { _tag: "ToolTimeout" } })
    })

    it("an unknown original name waits for the services still connecting (they have no tool list yet)", () => {
      const waiting = resolve({ tool_name: "nowhere" })
      expect(waiting._tag).toBe("Wait")
      expect(resolve({ tool_name: "nowhere" }, true)).toMatchObject({ _tag: "Refused", error: { _tag: "ToolTimeout" } })
    })
  })

  describe("runCall", () => {
    it("hands back the upstream's result and records the call", async () => {
      const exit = await runCall(ctx(), { tool_name: "one__add", args: { a: 2, b: 3 } })
      expect(Exit.isSuccess(exit)).toBe(true)
      if (!Exit.isSuccess(exit)) return
      expect(exit.value).toMatchObject({ serviceName: "one", original: "add", result: { content: [{ type: "text", text: "5" }] } })
      expect(await recordOf(exit.value.span.spanId)).toMatchObject({ outcome: "success", service_name: "one", tool_name: "add" })
    })

    it("a tool's own error is a result, recorded as tool_error", async () => {
      const exit = await runCall(ctx(), { tool_name: "one__fail" })
      expect(Exit.isSuccess(exit) && exit.value.result.isError).toBe(true)
      if (Exit.isSuccess(exit)) expect(await recordOf(exit.value.span.spanId)).toMatchObject({ outcome: "tool_error" })
    })

    it("arguments the tool's schema refuses fail before the request, each field named, recorded invalid_arguments", async () => {
      const exit = await runCall(ctx(), { tool_name: "one__add", args: { a: "x" } })
      expect(failureTag(exit)).toBe("InvalidArguments")
      const failure = Exit.isFailure(exit) ? Option.getOrThrow(Cause.failureOption(exit.cause)) : undefined
      expect(failure).toMatchObject({ problems: expect.arrayContaining([{ field: "args.a", problem: expect.any(String) }, { field: "args.b", problem: "is required" }]) })
      expect(await lastRecord("add")).toMatchObject({ outcome: "invalid_arguments" })
    })

    it("a refused target is not recorded (it reached no service)", async () => {
      expect(failureTag(await runCall(ctx(), { tool_name: "one__nothing" }))).toBe("ToolNotFound")
      expect(await lastRecord("nothing")).toBeUndefined()
    })

    it("a service still connecting past the call's time-out is ToolTimeout", async () => {
      expect(failureTag(await runCall(ctx(), { tool_name: "mute__x", timeout: 0.2 }))).toBe("ToolTimeout")
    })

    it("the caller's abort cancels the call upstream: interrupted, recorded cancelled", async () => {
      const cancel = new Cancel()
      const running = runCall(ctx(), { tool_name: "one__sleep", args: { ms: 10_000 } }, cancel)
      expect(await eventually(() => store.forStore().effects.host.inFlightCalls > 0, 10_000)).toBe(true)
      cancel.abort()
      const exit = await running
      expect(Exit.isInterrupted(exit)).toBe(true)
      expect(await lastRecord("sleep")).toMatchObject({ outcome: "cancelled" })
    })

    it("callOutcome is the same pipeline as an Effect: interrupting it cancels the call, once recorded", async () => {
      const fiber = Effect.runFork(callOutcome(ctx(), { tool_name: "two__sleep", args: { ms: 10_000 } }))
      expect(await eventually(() => store.forStore().effects.host.inFlightCalls > 0, 10_000)).toBe(true)
      const exit = await Effect.runPromise(Fiber.interrupt(fiber))
      expect(Exit.isInterrupted(exit)).toBe(true)
      // The interruption ended once the record was taken.
      expect((await store.forStore().toolRecords({ limit: 1, offset: 0, service_name: "two", tool_name: "sleep" })).executions[0]).toMatchObject({ outcome: "cancelled" })
      expect(store.forStore().effects.host.inFlightCalls).toBe(0)
    })
  })

  // The step a call made here and a call forwarded from another replica share (src/runtime/service-request.ts).
  describe("a request on a service's connection", () => {
    const actor = (name: string) => store.forStore().effects.findService(name)!
    const options = (ms: number) => ({ remaining: () => ms, signal: new Cancel() })

    it("a request refused for an expired session is sent once more, on the new connection once the service reconnected", async () => {
      const connections: unknown[] = []
      const exit = await requestOnService(actor("one"), async (connection) => {
        connections.push(connection)
        if (connections.length === 1) throw new McpRequestError("session_expired", "session not found")
        return (await connection.callTool("echo", { text: "again" }, { timeoutMs: 5000 })).content
      }, options(10_000))
      expect(exit).toEqual(Exit.succeed([{ type: "text", text: "again" }]))
      expect(connections).toHaveLength(2)
      expect(connections[1]).not.toBe(connections[0])
    })

    it("a second expiry is the failure itself, not a loop", async () => {
      let tries = 0
      const exit = await requestOnService(actor("two"), () => {
        tries += 1
        return Promise.reject(new McpRequestError("session_expired", "session not found"))
      }, options(10_000))
      expect(tries).toBe(2)
      expect(Exit.isFailure(exit) && Option.getOrUndefined(Cause.failureOption(exit.cause))).toMatchObject({ kind: "session_expired" })
    })

    it("a service still connecting at the deadline is NotConnected, and the request is never sent", async () => {
      let sent = false
      const exit = await requestOnService(actor("mute"), () => Promise.resolve((sent = true)), options(200))
      const failure = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
      expect(failure).toBeInstanceOf(NotConnected)
      expect((failure as NotConnected).stillConnecting).toBe(true)
      expect(sent).toBe(false)
    })

    it("the caller's abort ends the wait for a service still connecting: interrupted", async () => {
      const cancel = new Cancel()
      const exit = requestOnService(actor("mute"), () => Promise.resolve(1), { remaining: () => 10_000, signal: cancel })
      cancel.abort()
      expect(Exit.isInterrupted(await exit)).toBe(true)
    })
  })

  describe("failure classification", () => {
    const call = { kind: "call", toolName: "one__add", serviceName: "one", timeoutSeconds: 7 } as const
    const read = { kind: "catalog", name: "file:///a", field: "uri", uri: "file:///a", scope: "store", serviceName: "one", timeoutSeconds: 60 } as const

    it("a time-out is ToolTimeout for a call and a catalog request alike (record outcome timeout)", () => {
      const e = new McpRequestError("timeout", "no answer")
      expect(requestFailure(e, call)).toMatchObject({ _tag: "ToolTimeout", timeoutSeconds: 7 })
      expect(requestFailure(e, read)).toMatchObject({ _tag: "ToolTimeout", timeoutSeconds: 60 })
      expect(outcomeOf(requestFailure(e, call))).toBe("timeout")
    })

    it("-32602 is the caller's mistake: InvalidArguments for a call, a ValidationError on the field for the catalog", () => {
      const e = new McpRequestError("protocol", "bad params", -32602, { why: "x" })
      expect(requestFailure(e, call)).toMatchObject({ _tag: "InvalidArguments", upstream: { why: "x" } })
      expect(requestFailure(e, read)).toMatchObject({ _tag: "ValidationError", problems: [{ field: "uri" }] })
      expect(outcomeOf(requestFailure(e, call))).toBe("invalid_arguments")
    })

    it("a resource not found in either era's words is ResourceNotFound: -32002, or -32602 whose data.uri is the URI the upstream was asked", () => {
      const prefixed = { ...read, name: "mcp-store://one/file:///a", uri: "mcp-store://one/file:///a", sentUri: "file:///a" }
      const modern = new McpRequestError("protocol", "Resource not found: file:///a", -32602, { uri: "file:///a" })
      expect(requestFailure(modern, read)).toMatchObject({ _tag: "ResourceNotFound", uri: "file:///a" })
      // The caller's URI is the one reported; the upstream's data names the one it was sent.
      expect(requestFailure(modern, prefixed)).toMatchObject({ _tag: "ResourceNotFound", uri: "mcp-store://one/file:///a" })
      expect(requestFailure(new McpRequestError("protocol", "gone", -32002, { uri: "file:///a" }), prefixed)).toMatchObject({ _tag: "ResourceNotFound" })
      // Another URI in the data, or none, is a refusal of the params.
      expect(requestFailure(new McpRequestError("protocol", "bad", -32602, { uri: "file:///b" }), read)).toMatchObject({ _tag: "ValidationError" })
      expect(requestFailure(new McpRequestError("protocol", "bad", -32602), read)).toMatchObject({ _tag: "ValidationError" })
      // A call has no resource: -32602 stays InvalidArguments.
      expect(requestFailure(modern, call)).toMatchObject({ _tag: "InvalidArguments" })
    })

    it("other protocol errors, broken connections and oversize answers are UpstreamError with their outcome", () => {
      expect(requestFailure(new McpRequestError("protocol", "boom", -32603), call)).toMatchObject({ _tag: "UpstreamError", outcome: "protocol_error", code: -32603 })
      expect(requestFailure(new McpRequestError("protocol", "gone", -32002), read)).toMatchObject({ _tag: "ResourceNotFound", uri: "file:///a" })
      expect(requestFailure(new McpRequestError("protocol", "gone", -32002), call)).toMatchObject({ _tag: "UpstreamError", outcome: "protocol_error" })
      for (const kind of ["transport", "session_expired"] as const) {
        expect(requestFailure(new McpRequestError(kind, "cut"), call)).toMatchObject({ _tag: "UpstreamError", outcome: "transport_error" })
        expect(requestFailure(new McpRequestError(kind, "cut"), read)).toMatchObject({ _tag: "UpstreamError", outcome: "transport_error" })
      }
      const big = requestFailure(new McpRequestError("message_too_large", "too big"), call)
      expect(big).toMatchObject({ _tag: "UpstreamError", outcome: "message_too_large" })
      expect(outcomeOf(big)).toBe("message_too_large")
    })

    it("a request the cluster could not bring to the replica that runs the service is ClusterUnavailable: a call, a catalog request and a task request alike", () => {
      const e = new McpRequestError("unavailable", "no replica runs one now")
      for (const failure of [requestFailure(e, call), requestFailure(e, read), taskRequestFailure(e, "one")]) {
        expect(failure).toMatchObject({ _tag: "ClusterUnavailable" })
        expect(outcomeOf(failure)).toBe("unavailable")
      }
    })

    it("a task request's other failures: the upstream's JSON-RPC error kept, a broken connection a transport error, refusals as they are", () => {
      expect(taskRequestFailure(new McpRequestError("protocol", "no such task", -32602), "one")).toMatchObject({ _tag: "UpstreamError", outcome: "protocol_error", code: -32602 })
      expect(taskRequestFailure(new McpRequestError("transport", "cut"), "one")).toMatchObject({ _tag: "UpstreamError", outcome: "transport_error" })
      const tooMany = new TooMany({ message: "too many", limit: "per_user_connections", max: 1, retryAfterSeconds: 1 })
      expect(taskRequestFailure(tooMany, "one")).toBe(tooMany)
    })

    it("the caller's own abort is no failure", () => {
      expect(requestFailure(new McpRequestError("aborted", "gone"), call)).toBeUndefined()
      expect(requestFailure(new McpRequestError("aborted", "gone"), read)).toBeUndefined()
    })

    it("record outcomes of refusals and of anything that is not a store error", () => {
      expect(outcomeOf({ _tag: "ToolNotAllowed" })).toBe("tool_not_allowed")
      expect(outcomeOf({ _tag: "ServiceUnavailable" })).toBe("unavailable")
      expect(outcomeOf({ _tag: "TooMany" })).toBe("unavailable")
      expect(outcomeOf({ _tag: "ToolNotFound" })).toBe("protocol_error")
      expect(outcomeOf(new Error("a bug"))).toBe("transport_error")
    })
  })

  describe("an asynchronous call in replica mode, whose service another replica runs", () => {
    /** Asynchronous calls with an in-memory backend, and `startAsyncOn` as given. */
    const asyncCalls = (startAsyncOn: NonNullable<ConstructorParameters<typeof AsyncCalls>[3]>["startAsyncOn"]) => {
      const kept: string[] = []
      const backend = {
        start: async (entry: { call_id: string }) => void kept.push(entry.call_id),
        progress: () => undefined,
        target: () => undefined,
        task: () => undefined,
        finish: async () => undefined,
        get: async () => undefined,
        takeInterrupted: async () => [],
        settled: () => undefined,
        finishedCount: () => 0,
        close: async () => undefined
      }
      const records = { record: () => ({ record: {}, written: undefined }) }
      const calls = new AsyncCalls(backend as never, records as never, 10, { replicaId: "here", ownerOf: async () => "there", startAsyncOn, cancelAsyncOn: async () => undefined })
      return { calls, kept }
    }
    const render = () => ({ http_status: 200, body: {} })

    it("is not started here when that replica may have started it (no answer in time): 503, nothing kept here", async () => {
      const { calls, kept } = asyncCalls(async () => {
        throw new McpRequestError("timeout", "no answer within 11000 ms")
      })
      const started = await calls.start(ctx(), { tool_name: "one__echo", args: { text: "x" } }, "owner", render)
      expect(started).toBeInstanceOf(ClusterUnavailable)
      expect((started as ClusterUnavailable).message).toMatch(/may run there, so it was not started here/)
      expect(kept).toEqual([])
      expect(calls.running).toBe(0)
    })

    it("runs here when the request never started anything there", async () => {
      const { calls, kept } = asyncCalls(async () => ({ notStarted: "replica there has left the cluster" }))
      const started = await calls.start(ctx(), { tool_name: "one__echo", args: { text: "x" } }, "owner", render)
      expect(started).toMatchObject({ status: "running", tool_name: "one__echo", replica: "here" })
      expect(kept).toHaveLength(1)
      expect(await eventually(() => calls.running === 0, 5_000)).toBe(true)
      await calls.close()
    })
  })
})
