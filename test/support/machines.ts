/**
 * Test harness for the machines of src/machines (test/machines): fake MCP side-effect actors that
 * the test controls (every call is recorded with its input and a way to settle or answer it), a fake
 * connection, and a service actor started on a SimulatedClock with fixed `now` and `random`.
 */
import { createActor, fromCallback, fromPromise, SimulatedClock, type EventObject, type InspectionEvent } from "xstate"
import { STORE_SCOPE, type Scope, type ServiceDefinition, type Status } from "../../src/domain/service-definition.js"
import { defaultMonitoring, type MonitoringSettings } from "../../src/domain/settings.js"
import {
  serviceMachine,
  statusOf,
  type CheckInput,
  type ConnectInput,
  type ConnectionCommand,
  type ConnectOutput,
  type ConnectionInput,
  type ListedCatalog,
  type ListedTools,
  type ServiceContext,
  type ServiceEvent,
  type ServiceInput
} from "../../src/machines/service.js"
import { EMPTY_CATALOG, type McpConnection, type ToolInfo } from "../../src/mcp/types.js"
import { flush } from "./wait.js"

/** A fake connection: the machine only cares about its identity. */
export interface FakeConnection extends McpConnection {
  readonly label: string
}

let connectionCounter = 0
export const fakeConnection = (label = `conn-${++connectionCounter}`): FakeConnection => ({
  label,
  transportType: "streamable_http",
  serverInfo: { name: label, version: "1.0.0" },
  protocolVersion: "2025-11-25",
  era: undefined,
  pid: undefined,
  ping: async () => 1,
  listTools: async () => [],
  callTool: async () => ({ content: [] }),
  startToolCall: async () => ({ content: [] }),
  taskRequest: async () => ({}),
  followTask: async () => ({ content: [] }),
  close: async () => undefined,
  onClose: () => () => undefined,
  onToolsChanged: () => () => undefined,
  stderrTail: () => [],
  capabilities: { resources: false, subscribe: false, prompts: false, completions: false },
  listCatalog: async () => EMPTY_CATALOG,
  readResource: async () => ({ contents: [] }),
  getPrompt: async () => ({ messages: [] }),
  complete: async () => ({ completion: { values: [] } }),
  subscribeResource: async () => undefined,
  unsubscribeResource: async () => undefined,
  onResourceUpdated: () => () => undefined,
  onCatalogChanged: () => () => undefined,
  logging: false,
  setLoggingLevel: async () => undefined,
  onLogMessage: () => () => undefined
})

export const tool = (name: string): ToolInfo => ({ name, description: `${name} tool`, inputSchema: { type: "object" } })

interface Settle<T> {
  readonly resolve: (value: T) => void
  readonly reject: (error: unknown) => void
  /** True once the test resolved or rejected it. */
  settled: boolean
}

export interface ConnectCall extends Settle<ConnectOutput> {
  readonly input: ConnectInput
  readonly signal: AbortSignal
}
export interface HoldCall {
  readonly input: ConnectionInput
  readonly sendBack: (event: ServiceEvent) => void
  /** Set when the callback's cleanup ran (state exit or actor stop). */
  released: boolean
}
/** One CHECK_HEALTH sent to the connection holder. */
export interface CheckCall {
  readonly input: CheckInput
  /** Answers the check (dropped once it was withdrawn, as the runtime drops a late ping outcome). */
  readonly sendBack: (event: ServiceEvent) => void
  /** Set when the check is over: answered, or withdrawn (CANCEL_CHECK, a new check, the holder's end). */
  stopped: boolean
}

/** A catalog refresh (resources, templates, prompts), resolved with the catalog and its `ttlMs`. */
export interface CatalogCall extends Settle<ListedCatalog> {
  readonly input: CheckInput
  readonly signal: AbortSignal
}

/** A tool list refresh: resolved with the tools, or with the tools and their `ttlMs`. */
export interface ListCall extends Settle<ReadonlyArray<ToolInfo> | ListedTools> {
  readonly input: CheckInput
  readonly signal: AbortSignal
}
export interface CloseCall extends Settle<void> {
  readonly input: { readonly connection: McpConnection | undefined }
}

function controlled<T>(): { promise: Promise<T>; settle: Settle<T> } {
  let resolve!: (value: T) => void
  let reject!: (error: unknown) => void
  const promise = new Promise<T>((res, rej) => {
    resolve = res
    reject = rej
  })
  const settle: Settle<T> = {
    settled: false,
    resolve: (value) => {
      settle.settled = true
      resolve(value)
    },
    reject: (error) => {
      settle.settled = true
      reject(error)
    }
  }
  return { promise, settle }
}

/** Options of `createFakes` for tests that do not answer by hand (supervisors). */
export interface FakeOptions {
  /** When set, every connect settles at once with what this returns (an Error rejects). */
  readonly autoConnect?: (input: ConnectInput) => ConnectOutput | Error
  /** Called when holdConnection starts; may throw to simulate a crashing actor. */
  readonly onHold?: (input: ConnectionInput) => void
}

/** Fake side-effect actors with a record of every call. */
export const createFakes = (options: FakeOptions = {}) => {
  const calls = {
    connect: [] as ConnectCall[],
    hold: [] as HoldCall[],
    check: [] as CheckCall[],
    list: [] as ListCall[],
    catalog: [] as CatalogCall[],
    close: [] as CloseCall[]
  }
  const actors = {
    connect: fromPromise<ConnectOutput, ConnectInput>(({ input, signal }) => {
      const { promise, settle } = controlled<ConnectOutput>()
      calls.connect.push(Object.assign(settle, { input, signal }))
      const auto = options.autoConnect?.(input)
      if (auto instanceof Error) settle.reject(auto)
      else if (auto !== undefined) settle.resolve(auto)
      return promise
    }),
    holdConnection: fromCallback<ConnectionCommand, ConnectionInput>(({ input, sendBack, receive }) => {
      options.onHold?.(input)
      const call: HoldCall = { input, sendBack: (e) => sendBack(e), released: false }
      calls.hold.push(call)
      // Health checks are commands to the holder; each CHECK_HEALTH is recorded as a check call.
      let check: CheckCall | undefined
      const withdraw = () => {
        if (check) check.stopped = true
        check = undefined
      }
      receive((command) => {
        withdraw()
        if (command.type !== "CHECK_HEALTH") return
        const started: CheckCall = {
          input: { connection: input.connection, timeoutMs: command.timeoutMs },
          sendBack: (e) => {
            if (started.stopped) return
            started.stopped = true
            if (check === started) check = undefined
            sendBack(e)
          },
          stopped: false
        }
        check = started
        calls.check.push(started)
      })
      return () => {
        withdraw()
        call.released = true
      }
    }),
    listTools: fromPromise<ListedTools, CheckInput>(({ input, signal }) => {
      const { promise, settle } = controlled<ReadonlyArray<ToolInfo> | ListedTools>()
      calls.list.push(Object.assign(settle, { input, signal }))
      return promise.then((listed) => ("tools" in listed ? listed : { tools: listed }))
    }),
    listCatalog: fromPromise<ListedCatalog, CheckInput>(({ input, signal }) => {
      const { promise, settle } = controlled<ListedCatalog>()
      calls.catalog.push(Object.assign(settle, { input, signal }))
      return promise
    }),
    closeConnection: fromPromise<void, { readonly connection: McpConnection | undefined }>(({ input }) => {
      const { promise, settle } = controlled<void>()
      calls.close.push(Object.assign(settle, { input }))
      return promise
    })
  }
  return { calls, actors }
}
export type Fakes = ReturnType<typeof createFakes>

const last = <T>(items: ReadonlyArray<T>, what: string): T => {
  const item = items[items.length - 1]
  if (item === undefined) throw new Error(`no ${what} call was made`)
  return item
}

export interface ServiceHarnessOptions {
  readonly settings?: Partial<MonitoringSettings>
  readonly definition?: ServiceDefinition
  readonly random?: () => number
  readonly crash?: ServiceInput["crash"]
  readonly scope?: Scope
  readonly name?: string
  /** Start the clock here (so `now` is not 0 and `at` values are distinguishable). */
  readonly startAt?: number
  /** An inspection observer (the actor is then named like the store's service actors, `service:store:<name>`). */
  readonly inspect?: (event: InspectionEvent) => void
}

export const DEFINITION: ServiceDefinition = { url: "http://127.0.0.1:9/mcp" }

/** A service actor on a simulated clock with controllable fakes. */
export const startService = (options: ServiceHarnessOptions = {}) => {
  const clock = new SimulatedClock()
  clock.set(options.startAt ?? 1_000_000)
  const fakes = createFakes()
  const settings = defaultMonitoring(options.settings ?? {})
  const input: ServiceInput = {
    scope: options.scope ?? STORE_SCOPE,
    name: options.name ?? "svc",
    definition: options.definition ?? DEFINITION,
    settings,
    crash: options.crash,
    now: () => clock.now(),
    random: options.random ?? (() => 0.5)
  }
  const actor = createActor(serviceMachine.provide({ actors: fakes.actors }), {
    clock,
    input,
    ...(options.inspect !== undefined ? { inspect: options.inspect, id: `service:store:${input.name}` } : {})
  })
  const errors: unknown[] = []
  actor.subscribe({ error: (e) => errors.push(e) })
  actor.start()

  const h = {
    actor,
    clock,
    fakes,
    calls: fakes.calls,
    settings,
    errors,
    status: (): Status => statusOf(actor.getSnapshot()),
    ctx: (): ServiceContext => actor.getSnapshot().context,
    send: (event: ServiceEvent) => actor.send(event),
    /** Moves the simulated clock forward, then lets promise actors settle. */
    advance: async (ms: number) => {
      clock.increment(ms)
      await flush()
    },
    lastConnect: () => last(calls().connect, "connect"),
    lastHold: () => last(calls().hold, "holdConnection"),
    lastCheck: () => last(calls().check, "health check"),
    lastList: () => last(calls().list, "listTools"),
    lastClose: () => last(calls().close, "closeConnection"),
    /** Resolves the pending connect with a new fake connection (and tools). */
    connectOk: async (tools: ReadonlyArray<ToolInfo> = [tool("a")], connection: FakeConnection = fakeConnection()) => {
      const call = h.lastConnect()
      if (call.settled) throw new Error("the last connect call is already settled")
      call.resolve({ connection, tools })
      await flush()
      return connection
    },
    connectFail: async (message = "connection refused") => {
      const call = h.lastConnect()
      if (call.settled) throw new Error("the last connect call is already settled")
      call.reject(new Error(message))
      await flush()
    },
    /** Answers the pending health check. */
    report: async (report: { ok: boolean; responseTimeMs?: number; error?: string }) => {
      const call = h.lastCheck()
      if (call.stopped) throw new Error("the last health check is no longer running")
      call.sendBack({ type: "HEALTH_REPORT", ...report })
      await flush()
    },
    /** Runs the clock to the next health check (it must be due within `ms`). */
    nextCheck: async (ms: number) => {
      const before = calls().check.length
      await h.advance(ms)
      if (calls().check.length !== before + 1) throw new Error(`expected one health check within ${ms} ms`)
      return h.lastCheck()
    },
    /** The `to` of every recorded transition, in order. */
    transitionsTo: (): Array<Status> => actor.getSnapshot().context.transitions.map((t) => t.to),
    lastTransition: () => last(actor.getSnapshot().context.transitions, "transition")
  }
  function calls() {
    return fakes.calls
  }
  return h
}
export type ServiceHarness = ReturnType<typeof startService>

/** A service that is connected and healthy (first check due after random*health_check_seconds). */
export const startHealthy = async (options: ServiceHarnessOptions = {}) => {
  const h = startService(options)
  await h.connectOk()
  if (h.status() !== "healthy") throw new Error(`expected healthy, got ${h.status()}`)
  return h
}

/** A healthy service taken to `warning` by one failed check. */
export const startWarning = async (options: ServiceHarnessOptions = {}) => {
  const h = await startHealthy(options)
  await h.nextCheck(h.settings.health_check_seconds * 1000)
  await h.report({ ok: false, error: "ping failed" })
  if (h.status() !== "warning") throw new Error(`expected warning, got ${h.status()}`)
  return h
}
