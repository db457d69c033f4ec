/**
 * The call path of a scope: a tool name resolved to its service (never hijacked by a look-alike
 * name of another service), arguments checked against the tool's schema, the call sent through the
 * service's connection (waiting for a service that is still connecting, once more after an
 * expired session), its failure classified, and a record written for every call.
 */
import type { CallToolResult } from "@modelcontextprotocol/sdk/types.js"
import { Cause, Effect, Either, Exit, type Fiber, FiberId, Option } from "effect"
import { statusOf, type ServiceActorRef, type ServiceSnapshot } from "../machines/service.js"
import { ErrorCode, McpError } from "@modelcontextprotocol/sdk/types.js"
import { Cancel, McpRequestError, type CallHooks, type CallProgress, type UpstreamRequestRelay } from "../mcp/types.js"
import type { Outcome } from "../records/records.js"
import { argumentProblems } from "./arguments.js"
import { awaitSnapshot, type WaitEnd } from "./bridge.js"
import {
  AmbiguousTool,
  InvalidArguments,
  ServiceNotFound,
  ServiceUnavailable,
  ToolNotAllowed,
  ToolNotFound,
  ToolTimeout,
  UpstreamError,
  isStoreError,
  type TooMany
} from "./errors.js"
import type { ScopeContext } from "./host.js"
import { log } from "./log.js"
import { EVENTS_PROGRESS_INTERVAL_MS, LatestThrottle, type ProgressEvent } from "./progress.js"
import { attempt } from "./run.js"
import { ownEntry } from "../machines/supervisor.js"
import { TOOL_SEPARATOR, callableName, isConnected, iso, offerReason } from "./views.js"
import { serviceToolFilter } from "../domain/tool-filter.js"
import type { ToolInfo } from "../mcp/types.js"
import { didYouMean, MAX_SUGGESTIONS, suggestions } from "../domain/suggest.js"

export interface CallToolInput {
  readonly tool_name: string
  readonly args?: Record<string, unknown> | undefined
  readonly service_name?: string | undefined
  /** Seconds; default 60, at most the store's `maxCallSeconds`. */
  readonly timeout?: number | undefined
  /**
   * The caller's own hearing of the call's progress (an MCP client's `progressToken`). Every
   * call's progress also goes to `/events` with its `trace_id`, and restarts its time-out.
   */
  readonly onProgress?: ((progress: CallProgress) => void) | undefined
  /** Answers the upstream's elicitation and sampling requests of the call (an MCP client's); without it they are declined. */
  readonly relay?: UpstreamRequestRelay | undefined
}

/** The relay of a REST call: nobody can answer an upstream's request, declined in words that say why. */
const declinedOverRest: UpstreamRequestRelay = (request) =>
  Promise.reject(new McpError(ErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the tool call was made through the REST API, which cannot answer it; call the tool from an MCP client that declares the capability`))

export interface CallToolOutput {
  readonly result: unknown
  readonly content: CallToolResult["content"]
  readonly structured_content: Record<string, unknown> | null
  readonly is_error: boolean
  readonly tool_name: string
  readonly original_name: string
  readonly service_name: string
  readonly duration_ms: number
  readonly trace_id: string
}

const DEFAULT_CALL_TIMEOUT_SECONDS = 60

/** A call's time-out in seconds: its own (default 60), never over the store's `maxCallSeconds`. */
const callTimeoutSeconds = (ctx: ScopeContext, input: CallToolInput): number =>
  Math.min(input.timeout ?? DEFAULT_CALL_TIMEOUT_SECONDS, ctx.host.limits.maxCallSeconds)

/**
 * The hooks of a call sent to its service: its progress to the caller's `onProgress` and to the
 * `/events` streams (throttled, built at the first progress), its time-out restarted by each
 * progress up to `maxCallSeconds` from its start. `close` stops the events when the call ends.
 */
const callHooks = (ctx: ScopeContext, input: CallToolInput, serviceName: string, original: string, traceId: string, started: number) => {
  let events: LatestThrottle<ProgressEvent> | undefined
  const progress = ctx.host.progress
  const own = input.onProgress
  const hooks: CallHooks = {
    maxTotalMs: Math.max(0, ctx.host.limits.maxCallSeconds * 1000 - (performance.now() - started)),
    relay: input.relay ?? declinedOverRest,
    onProgress: (p) => {
      own?.(p)
      if (!progress.listening) return
      events ??= new LatestThrottle(EVENTS_PROGRESS_INTERVAL_MS, (e) => progress.emit(e))
      events.push({
        scope: ctx.label,
        agent_id: ctx.scope.kind === "agent" ? ctx.scope.agentId : null,
        service_name: serviceName,
        tool_name: original,
        trace_id: traceId,
        ...p
      })
    }
  }
  return { hooks, close: () => events?.close() }
}

/** The refusal of a call to a service that is not connected: its status and next retry. */
const unavailable = (snapshot: ServiceSnapshot): ServiceUnavailable => {
  const status = statusOf(snapshot)
  return new ServiceUnavailable({
    message: `Service '${snapshot.context.name}' is ${status}; try again later`,
    serviceName: snapshot.context.name,
    status,
    nextRetryAt: iso(snapshot.context.nextRetryAt),
    lastError: snapshot.context.lastError ?? null
  })
}

/** The text form of an MCP tool result (shared/API.md, call_tool `result`). */
const resultValue = (r: CallToolResult): unknown => {
  if (r.structuredContent !== undefined) return r.structuredContent
  const content = r.content ?? []
  if (content.length > 0 && content.every((c) => c.type === "text")) {
    const texts = content.map((c) => (c as { text: string }).text)
    return texts.length === 1 ? texts[0] : texts
  }
  return content
}

/** The text a tool gave with `isError`, for the response message. */
export const toolErrorMessage = (output: Pick<CallToolOutput, "content">): string => {
  const texts = output.content.filter((c) => c.type === "text").map((c) => (c as { text: string }).text)
  return texts.length > 0 ? texts.join("\n") : "the tool reported an error"
}

/** The record outcome of a failed call. */
const outcomeOf = (e: unknown): Outcome => {
  if (!isStoreError(e)) return "transport_error" // the caller went away, or a bug
  switch (e._tag) {
    case "ToolTimeout":
      return "timeout"
    case "ServiceUnavailable":
    case "TooMany":
      return "unavailable"
    case "UpstreamError":
      return e.outcome
    case "ToolNotAllowed":
      return "tool_not_allowed"
    case "InvalidArguments":
      // Refused by the tool's schema here, or by the upstream (-32602): the caller's mistake.
      return "invalid_arguments"
    default:
      return "protocol_error"
  }
}

let traceCounter = 0
const newTraceId = () => `${Date.now().toString(36)}-${(traceCounter++).toString(36)}-${Math.random().toString(36).slice(2, 8)}`

/**
 * The services a callable name `<service>__<tool>` names, with the tool part: every registered
 * service of the scope whose name ends where a `__` begins (a name may end in `_`, so `a___x` is
 * `a` + `_x` or `a_` + `x`). Empty when the name names no registered service.
 */
function namedServices(ctx: ScopeContext, toolName: string): Array<{ actor: ServiceActorRef; original: string }> {
  const first = toolName.indexOf(TOOL_SEPARATOR)
  if (first <= 0) return []
  let end = first
  while (toolName[end + TOOL_SEPARATOR.length] === "_") end += 1
  const actors = ctx.actors()
  const out: Array<{ actor: ServiceActorRef; original: string }> = []
  for (let at = first; at <= end; at++) {
    const actor = ownEntry(actors, toolName.slice(0, at))
    if (actor) out.push({ actor, original: toolName.slice(at + TOOL_SEPARATOR.length) })
  }
  return out
}

/**
 * Resolves an original tool name in this scope: the one service that exposes it (or the one
 * `service_name` names). Names of the form `<service>__<tool>` with a registered `<service>` never
 * come here (see `callTarget`).
 */
function resolveTool(ctx: ScopeContext, toolName: string, serviceName: string | undefined): { actor: ServiceActorRef; original: string } {
  const pool = serviceName !== undefined ? [ctx.requireService(serviceName)] : Object.values(ctx.actors())
  const found = pool.filter((a) => a.getSnapshot().context.tools.some((t) => t.name === toolName))
  // A service whose allow-list (or the caller's) leaves the tool out does not offer it: the name
  // resolves among the others, and is refused only when no other service has it.
  const matches = found.filter((a) => notAllowed(ctx, a, toolName) === undefined)
  if (matches.length === 0 && found.length > 0) throw notAllowed(ctx, found[0]!, toolName)!
  if (matches.length === 1) return { actor: matches[0]!, original: toolName }
  if (matches.length > 1) {
    const candidates = matches.map((a) => callableName(a.getSnapshot().context.name, toolName))
    throw new AmbiguousTool({
      message: `Tool '${toolName}' is offered by several services: use one of ${candidates.join(", ")} or give service_name`,
      toolName,
      candidates
    })
  }
  throw toolNotFound(ctx, toolName)
}

/**
 * The refusal of a call to `original` of `actor` by an allow-list: the service's own
 * (include_tools / exclude_tools) or the caller's key's `tools` list; undefined when allowed. Each
 * list is compiled once (src/domain/tool-filter.ts): this is a regex test or two per call.
 */
function notAllowed(ctx: ScopeContext, actor: ServiceActorRef, original: string): ToolNotAllowed | undefined {
  const { name, definition } = actor.getSnapshot().context
  const byService = serviceToolFilter(definition)(original)
  if (byService === undefined && (ctx.gate === undefined || ctx.gate.allows(callableName(name, original)))) return undefined
  const toolName = callableName(name, original)
  return new ToolNotAllowed({
    message: `Tool '${toolName}' is not allowed: ${byService ?? "this key's tools list does not match it"}`,
    toolName,
    serviceName: name,
    original,
    scope: ctx.label
  })
}

/** Whether a tool is offered to this caller: listed by the views (not hidden) and allowed by the key's list. */
const offered = (ctx: ScopeContext, name: string, definition: Parameters<typeof offerReason>[0], t: ToolInfo): boolean =>
  offerReason(definition, t) === undefined && (ctx.gate === undefined || ctx.gate.allows(callableName(name, t.name)))

/** A name not found, without suggestions: cheap, for the look-ups that may still find it (see `withSuggestions`). */
function toolNotFound(ctx: ScopeContext, toolName: string): ToolNotFound {
  return new ToolNotFound({
    message: `Tool '${toolName}' not found in ${ctx.label === "store" ? "the store" : `agent '${ctx.label}'`}`,
    toolName,
    scope: ctx.label,
    suggestions: []
  })
}

/**
 * The callable names of the scope's tools whose name is closest to `toolName` (`demo__addd`:
 * `demo__add`): compared by callable name, or by original name for a name without `__` (`addd`:
 * `demo__add`). The services `toolName` names come first, so the cap on candidates never leaves
 * them out. Only this scope's tools: an agent never learns another scope's names from a suggestion.
 */
function toolSuggestions(ctx: ScopeContext, toolName: string): Array<string> {
  const actors = Object.values(ctx.actors())
  if (toolName.includes(TOOL_SEPARATOR)) {
    const named = new Set(namedServices(ctx, toolName).map(({ actor }) => actor))
    const ordered = [...named, ...actors.filter((a) => !named.has(a))]
    function* callableNames() {
      for (const actor of ordered) {
        const { name, tools, definition } = actor.getSnapshot().context
        for (const t of tools) if (offered(ctx, name, definition, t)) yield callableName(name, t.name)
      }
    }
    return suggestions(toolName, callableNames())
  }
  function* originalNames() {
    for (const actor of actors) {
      const { name, tools, definition } = actor.getSnapshot().context
      for (const t of tools) if (offered(ctx, name, definition, t)) yield t.name
    }
  }
  const close = new Set(suggestions(toolName, originalNames()))
  const out: Array<string> = []
  for (const actor of actors) {
    const { name, tools, definition } = actor.getSnapshot().context
    for (const t of tools) if (close.has(t.name) && offered(ctx, name, definition, t) && out.length < MAX_SUGGESTIONS) out.push(callableName(name, t.name))
  }
  return out
}

/** A call's final ToolNotFound, with "did you mean" (computed only now: a name was not found). */
const withSuggestions = (ctx: ScopeContext) => (e: CallToolError): CallToolError => {
  if (!(e instanceof ToolNotFound)) return e
  const close = toolSuggestions(ctx, e.toolName)
  return close.length === 0 ? e : new ToolNotFound({ ...e, message: `${e.message}${didYouMean(close)}`, suggestions: close })
}

function stillConnecting(toolName: string, timeoutSeconds: number): ToolTimeout {
  return new ToolTimeout({
    message: `Tool '${toolName}' did not answer within ${timeoutSeconds} s: its service is still connecting`,
    toolName,
    timeoutSeconds
  })
}

/** What a call can fail with; src/http/errors.ts maps each to its HTTP answer. */
export type CallToolError =
  | ServiceNotFound
  | ToolNotFound
  | ToolNotAllowed
  | AmbiguousTool
  | InvalidArguments
  | UpstreamError
  | ServiceUnavailable
  | ToolTimeout
  | TooMany

/** A resolved call: the service and the tool's original name. */
interface Target {
  readonly actor: ServiceActorRef
  readonly original: string
}

const isLookupError = (e: unknown): e is ServiceNotFound | ToolNotFound | ToolNotAllowed | AmbiguousTool =>
  e instanceof ServiceNotFound || e instanceof ToolNotFound || e instanceof ToolNotAllowed || e instanceof AmbiguousTool

/**
 * The service and original tool name a call goes to. A callable name `<service>__<tool>` whose
 * `<service>` is registered in the scope goes to that service or nowhere: while it is
 * `initializing` (just added, restarting, starting up) the call waits for it, up to the deadline;
 * then a connected service without the tool is 404 and one that is not connected 503. It never
 * falls back to another service's tool of that literal name, which could otherwise stand in for
 * it whenever it has no tool list. Any other name is an original name (see `resolveTool`).
 */
const callTarget = (ctx: ScopeContext, input: CallToolInput, timeoutSeconds: number, remaining: () => number): Effect.Effect<Target, CallToolError> => {
  const quick = quickTarget(ctx, input)
  return quick !== undefined ? Effect.succeed(quick) : slowTarget(ctx, input, timeoutSeconds, remaining)
}

/**
 * The target of the common call, found at once: a callable name whose service has the tool, or an
 * original name that resolves to one service. Undefined whenever `callTarget` would have to wait or
 * refuse: it then takes the long way, which finds these same targets first.
 */
const quickTarget = (ctx: ScopeContext, input: CallToolInput): Target | undefined => {
  if (input.service_name === undefined) {
    const named = namedServices(ctx, input.tool_name)
    if (named.length > 0) {
      const hit = named.find(({ actor, original }) => actor.getSnapshot().context.tools.some((t) => t.name === original))
      // A tool outside an allow-list is refused on the long way (`slowLookup`).
      return hit !== undefined && notAllowed(ctx, hit.actor, hit.original) === undefined ? hit : undefined
    }
  }
  try {
    return resolveTool(ctx, input.tool_name, input.service_name)
  } catch {
    return undefined
  }
}

/** `callTarget` when the target is not found at once: waits for services still connecting, or refuses. */
const slowTarget = (ctx: ScopeContext, input: CallToolInput, timeoutSeconds: number, remaining: () => number): Effect.Effect<Target, CallToolError> =>
  Effect.mapError(slowLookup(ctx, input, timeoutSeconds, remaining), withSuggestions(ctx))

/** `slowTarget`'s look-up: waits for services still connecting, or refuses (without suggestions). */
const slowLookup = (ctx: ScopeContext, input: CallToolInput, timeoutSeconds: number, remaining: () => number): Effect.Effect<Target, CallToolError> =>
  Effect.gen(function* () {
    const waitFor = (actors: ReadonlyArray<ServiceActorRef>) =>
      Effect.forEach(actors, (a) => awaitSnapshot(a, (s) => statusOf(s) !== "initializing", { timeoutMs: remaining(), gate: ctx.host.waiters }), {
        concurrency: "unbounded",
        discard: true
      })
    const initializing = (a: ServiceActorRef) => statusOf(a.getSnapshot()) === "initializing"
    for (let named = namedServices(ctx, input.tool_name); named.length > 0 && input.service_name === undefined; ) {
      const hit = named.find(({ actor, original }) => actor.getSnapshot().context.tools.some((t) => t.name === original))
      if (hit) {
        const refused = notAllowed(ctx, hit.actor, hit.original)
        return refused === undefined ? hit : yield* Effect.fail(refused)
      }
      const pending = named.filter(({ actor }) => initializing(actor)).map(({ actor }) => actor)
      if (pending.length === 0) {
        const snapshot = named[0]!.actor.getSnapshot()
        return yield* isConnected(statusOf(snapshot)) ? Effect.fail(toolNotFound(ctx, input.tool_name)) : Effect.fail(unavailable(snapshot))
      }
      if (remaining() <= 0) return yield* stillConnecting(input.tool_name, timeoutSeconds)
      yield* waitFor(pending)
      named = namedServices(ctx, input.tool_name)
    }
    const resolve = attempt(() => resolveTool(ctx, input.tool_name, input.service_name), isLookupError)
    const first = yield* Effect.either(resolve)
    if (Either.isRight(first)) return first.right
    // Services still connecting have no tool list yet: give them until the deadline. (Looked for
    // only when the name does not resolve: scanning every service costs on each call.)
    if (!(first.left instanceof ToolNotFound)) return yield* first.left
    const pool =
      input.service_name !== undefined ? [yield* attempt(() => ctx.requireService(input.service_name!), isLookupError)] : Object.values(ctx.actors())
    const pending = pool.filter(initializing)
    // The service `service_name` names has no tool list while it is not connected (it may never
    // have been): 503 with its status and next retry, as a callable name gets, not 404.
    const notConnected = () => input.service_name !== undefined && !isConnected(statusOf(pool[0]!.getSnapshot())) && !initializing(pool[0]!)
    if (pending.length === 0) return yield* notConnected() ? Effect.fail(unavailable(pool[0]!.getSnapshot())) : first.left
    yield* waitFor(pending)
    const second = yield* Effect.either(resolve)
    if (Either.isRight(second)) return second.right
    if (second.left instanceof ToolNotFound && notConnected()) return yield* Effect.fail(unavailable(pool[0]!.getSnapshot()))
    // The deadline passed while a service that may own the tool was still connecting: the call
    // ran out of time (504), it did not find that the tool is missing (404).
    if (second.left instanceof ToolNotFound && pending.some(initializing)) return yield* stillConnecting(input.tool_name, timeoutSeconds)
    return yield* second.left
  })

/**
 * Takes the record of a call that reached its service, from its exit; a promise when the record's
 * line is not in the file yet (undefined when it is).
 */
const recorder =
  (ctx: ScopeContext, input: CallToolInput, serviceName: string, original: string, started: number, traceId: string) =>
  (exit: Exit.Exit<CallToolOutput, CallToolError>): Promise<unknown> | undefined => {
    const record = (outcome: Outcome, result: unknown, error: string | null): Promise<unknown> | undefined =>
      ctx.host.records
        .record({
          scope: ctx.scope.kind,
          agent_id: ctx.scope.kind === "agent" ? ctx.scope.agentId : null,
          service_name: serviceName,
          tool_name: original,
          params: input.args ?? {},
          result,
          outcome,
          error,
          duration_ms: Math.round((performance.now() - started) * 100) / 100,
          trace_id: traceId
        })
        .written?.catch((e: unknown) => log.error(`a tool-call record could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "record_failed" }))
    if (Exit.isSuccess(exit)) {
      const output = exit.value
      return record(output.is_error ? "tool_error" : "success", output.result, output.is_error ? toolErrorMessage(output) : null)
    }
    const failure = Cause.failureOption(exit.cause)
    if (Option.isSome(failure)) return record(outcomeOf(failure.value), null, failure.value.message)
    // Interrupted: the caller cancelled the call or went away (the upstream was sent notifications/cancelled).
    if (Cause.isInterruptedOnly(exit.cause)) return record("cancelled", null, "the caller cancelled the call or went away")
    return record("transport_error", null, String(Cause.squash(exit.cause)))
  }

/**
 * A call refused by an allow-list: a log line (the scope, the tool, the list that refused it; never
 * a key) and a record with the outcome `tool_not_allowed`, on disk before the refusal is answered.
 */
const refusalRecorded = (ctx: ScopeContext, input: CallToolInput, e: ToolNotAllowed, started: number, traceId: string): Effect.Effect<void> =>
  Effect.suspend(() => {
    log.warn(`refused a call in ${ctx.label === "store" ? "the store" : `agent '${ctx.label}'`}: ${e.message}`, {
      event: "tool_not_allowed",
      scope: ctx.label,
      service: e.serviceName,
      tool: e.original
    })
    const written = recorder(ctx, input, e.serviceName, e.original, started, traceId)(Exit.fail(e))
    return written === undefined ? Effect.void : Effect.asVoid(Effect.promise(() => written))
  })

/**
 * Calls a tool. Waits for an `initializing` service (up to the time-out); a service that is not
 * connected fails with ServiceUnavailable; an expired session is re-established and the call sent
 * once more; a transport failure counts as a failed health check. Every call that reached a
 * service is recorded, however it ends (a caller that went away included): the record is taken at
 * once (counted, in memory, to its listeners) and its line written to the file, at once or, while
 * the file is being maintained, right after. The answer waits for that write: a call whose answer a
 * client has seen is on disk, even if the store is killed right after. (`startCall` is the same
 * call without a fiber, for the common case.)
 */
export const callTool = (ctx: ScopeContext, input: CallToolInput): Effect.Effect<CallToolOutput, CallToolError> =>
  Effect.suspend(() => {
    const timeoutSeconds = callTimeoutSeconds(ctx, input)
    const started = performance.now()
    const deadline = started + timeoutSeconds * 1000
    const remaining = () => Math.max(0, deadline - performance.now())
    const traceId = newTraceId()
    const target = Effect.tapError(callTarget(ctx, input, timeoutSeconds, remaining), (e) =>
      e instanceof ToolNotAllowed ? refusalRecorded(ctx, input, e, started, traceId) : Effect.void
    )
    return Effect.flatMap(target, ({ actor, original }) => {
      const serviceName = actor.getSnapshot().context.name
      const recorded = recorder(ctx, input, serviceName, original, started, traceId)
      // Counted in flight from the start to the end of the call, as one resource with its record:
      // an interruption cannot come between the count and the release.
      return Effect.uninterruptibleMask((restore) =>
        Effect.suspend(() => {
          ctx.host.inFlightCalls += 1
          const { hooks, close } = callHooks(ctx, input, serviceName, original, traceId, started)
          return Effect.onExit(restore(invoke(ctx, actor, original, input, { started, traceId, timeoutSeconds, remaining, hooks })), (exit) => {
            close()
            ctx.host.inFlightCalls -= 1
            const written = recorded(exit)
            return written === undefined ? Effect.void : Effect.promise(() => written)
          })
        })
      )
    })
  })

/** A call started by `startCall`. */
export interface StartedCall {
  /** Settles with the call's exit once its record is taken and its line written (never rejects). */
  readonly exit: Promise<Exit.Exit<CallToolOutput, CallToolError>>
  /** The caller went away: the request is cancelled upstream and the call ends interrupted (recorded as such). */
  readonly abandon: () => void
}

/**
 * `callTool` for the common call, without a fiber: a target found at once (see `quickTarget`) on a
 * connected service, arguments that pass the tool's schema. Its exit, record, in-flight count,
 * cancellation and failures are `callTool`'s (an expired session goes on in `callTool`'s own
 * retry). Undefined, with nothing done, for any other call: `callTool` takes it. On the hot path a
 * fiber and its steps cost about a third of the store's CPU per call.
 */
export const startCall = (ctx: ScopeContext, input: CallToolInput): StartedCall | undefined => {
  const target = quickTarget(ctx, input)
  if (target === undefined) return undefined
  const { actor, original } = target
  const snapshot = actor.getSnapshot()
  const connection = snapshot.context.connection
  if (!isConnected(statusOf(snapshot)) || connection === undefined) return undefined
  const tool = snapshot.context.tools.find((t) => t.name === original)
  if (tool !== undefined && argumentProblems(tool, input.args ?? {}).length > 0) return undefined

  const timeoutSeconds = callTimeoutSeconds(ctx, input)
  const started = performance.now()
  const deadline = started + timeoutSeconds * 1000
  const remaining = () => Math.max(0, deadline - performance.now())
  const traceId = newTraceId()
  const { hooks, close } = callHooks(ctx, input, snapshot.context.name, original, traceId, started)
  const call = { started, traceId, timeoutSeconds, remaining, hooks }
  const recorded = recorder(ctx, input, snapshot.context.name, original, started, traceId)
  const cancel = new Cancel()
  let retry: Fiber.RuntimeFiber<CallToolResult, CallToolError> | undefined
  let settled = false
  let resolveExit!: (exit: Exit.Exit<CallToolOutput, CallToolError>) => void
  const exit = new Promise<Exit.Exit<CallToolOutput, CallToolError>>((resolve) => (resolveExit = resolve))
  const settle = (end: Exit.Exit<CallToolResult, CallToolError>) => {
    if (settled) return
    settled = true
    close()
    ctx.host.inFlightCalls -= 1
    try {
      const output = Exit.map(end, (result) => outputOf(actor, original, result, call))
      const written = recorded(output)
      if (written === undefined) resolveExit(output)
      else void written.then(() => resolveExit(output))
    } catch (e) {
      // A bug in the answer's or the record's making: a defect, as in `callTool`'s finalizer.
      resolveExit(Exit.die(e))
    }
  }
  ctx.host.inFlightCalls += 1
  connection.callTool(original, input.args ?? {}, { timeoutMs: remaining(), signal: cancel, hooks }).then(
    (result) => settle(Exit.succeed(result)),
    (e: unknown) => {
      if (settled) return
      if (!(e instanceof McpRequestError)) return settle(Exit.die(e))
      if (e.kind !== "session_expired") {
        const failure = failureOf(actor, input.tool_name, timeoutSeconds, e)
        return settle(failure === undefined ? Exit.interrupt(FiberId.none) : Exit.fail(failure))
      }
      retry = Effect.runFork(afterExpiry(ctx, actor, original, input, call, e))
      retry.addObserver(settle)
    }
  )
  const abandon = () => {
    if (settled) return
    cancel.abort()
    if (retry !== undefined) retry.unsafeInterruptAsFork(FiberId.none)
    else settle(Exit.interrupt(FiberId.none))
  }
  return { exit, abandon }
}

/**
 * A failed request as the call's failure (undefined: the caller went away); a transport failure
 * also counts as a failed check.
 */
const failureOf = (actor: ServiceActorRef, toolName: string, timeoutSeconds: number, e: McpRequestError): CallToolError | undefined => {
  const serviceName = actor.getSnapshot().context.name
  switch (e.kind) {
    case "aborted":
      return undefined
    case "timeout":
      return new ToolTimeout({ message: `Tool '${toolName}' did not answer within ${timeoutSeconds} s`, toolName, timeoutSeconds })
    case "protocol":
      return e.code === -32602
        ? new InvalidArguments({ message: `Invalid arguments for '${toolName}': ${e.message}`, toolName, upstream: e.data ?? null, problems: [] })
        : new UpstreamError({ message: `Service '${serviceName}' answered with an error: ${e.message}`, outcome: "protocol_error", serviceName, code: e.code })
    case "message_too_large":
      // The connection has closed itself: the service reconnects on its own.
      return new UpstreamError({ message: `Service '${serviceName}' sent an answer too large: ${e.message}`, outcome: "message_too_large", serviceName, code: undefined })
    default:
      if (e.kind === "transport") actor.send({ type: "HEALTH_REPORT", ok: false, error: e.message })
      return new UpstreamError({ message: `Connection to '${serviceName}' broke during the call: ${e.message}`, outcome: "transport_error", serviceName, code: undefined })
  }
}

/** A failed request as the call's failure, as an Effect (see `failureOf`). */
const callFailure = (actor: ServiceActorRef, toolName: string, timeoutSeconds: number, e: McpRequestError): Effect.Effect<never, CallToolError> => {
  const failure = failureOf(actor, toolName, timeoutSeconds, e)
  return failure === undefined ? Effect.interrupt : Effect.fail(failure)
}

/** What a call answers, from the tool's result. */
const outputOf = (actor: ServiceActorRef, original: string, result: CallToolResult, call: { readonly started: number; readonly traceId: string }): CallToolOutput => {
  const serviceName = actor.getSnapshot().context.name
  return {
    result: resultValue(result),
    content: result.content ?? [],
    structured_content: (result.structuredContent as Record<string, unknown> | undefined) ?? null,
    is_error: result.isError === true,
    tool_name: callableName(serviceName, original),
    original_name: original,
    service_name: serviceName,
    duration_ms: Math.round((performance.now() - call.started) * 100) / 100,
    trace_id: call.traceId
  }
}

interface CallTiming {
  readonly started: number
  readonly traceId: string
  readonly timeoutSeconds: number
  readonly remaining: () => number
  readonly hooks: CallHooks
}

/**
 * The request on the service's connection as it is now: a service still connecting is waited for
 * first; one that is not connected fails with ServiceUnavailable.
 */
const sendOnce = (ctx: ScopeContext, actor: ServiceActorRef, original: string, input: CallToolInput, call: CallTiming): Effect.Effect<CallToolResult, CallToolError | McpRequestError> => {
  const request = (ready: WaitEnd): Effect.Effect<CallToolResult, CallToolError | McpRequestError> => {
    const snapshot = actor.getSnapshot()
    const connection = snapshot.context.connection
    if (!isConnected(statusOf(snapshot)) || connection === undefined) {
      return ready === "timeout"
        ? callFailure(actor, input.tool_name, call.timeoutSeconds, new McpRequestError("timeout", "service still initializing"))
        : Effect.fail(unavailable(snapshot))
    }
    return Effect.async<CallToolResult, McpRequestError>((resume) => {
      // Cancelled if the call is interrupted (the caller went away): the server is told.
      const cancel = new Cancel()
      connection.callTool(original, input.args ?? {}, { timeoutMs: call.remaining(), signal: cancel, hooks: call.hooks }).then(
        (result) => resume(Effect.succeed(result)),
        (e: unknown) => resume(e instanceof McpRequestError ? Effect.fail(e) : Effect.die(e))
      )
      return Effect.sync(() => cancel.abort())
    })
  }
  return Effect.suspend(() =>
    statusOf(actor.getSnapshot()) !== "initializing"
      ? request("reached")
      : Effect.flatMap(awaitSnapshot(actor, (s) => statusOf(s) !== "initializing", { timeoutMs: call.remaining(), gate: ctx.host.waiters }), (ready) =>
          request(ready.end)
        )
  )
}

/** After an expired session (the server never ran the call): reconnects at once and sends the call once more. */
const afterExpiry = (
  ctx: ScopeContext,
  actor: ServiceActorRef,
  original: string,
  input: CallToolInput,
  call: CallTiming,
  e: McpRequestError
): Effect.Effect<CallToolResult, CallToolError> =>
  Effect.suspend(() => {
    actor.send({ type: "TRANSPORT_CLOSED", reason: `session expired: ${e.message}`, immediate: true })
    return Effect.zipRight(
      awaitSnapshot(actor, (s) => isConnected(statusOf(s)), { timeoutMs: call.remaining() }),
      Effect.catchAll(sendOnce(ctx, actor, original, input, call), (e2) =>
        e2 instanceof McpRequestError ? callFailure(actor, input.tool_name, call.timeoutSeconds, e2) : Effect.fail(e2)
      )
    )
  })

/** Sends a resolved call (arguments checked first); see `callTool`. */
const invoke = (ctx: ScopeContext, actor: ServiceActorRef, original: string, input: CallToolInput, call: CallTiming): Effect.Effect<CallToolOutput, CallToolError> =>
  Effect.suspend(() => {
    const tool = actor.getSnapshot().context.tools.find((t) => t.name === original)
    const problems = tool ? argumentProblems(tool, input.args ?? {}) : []
    if (problems.length > 0) {
      return Effect.fail(
        new InvalidArguments({
          message: `Invalid arguments for '${input.tool_name}': ${problems.map((p) => `${p.field} ${p.problem}`).join("; ")}`,
          toolName: input.tool_name,
          upstream: null,
          problems
        })
      )
    }
    const sent = Effect.catchAll(sendOnce(ctx, actor, original, input, call), (e): Effect.Effect<CallToolResult, CallToolError> => {
      if (!(e instanceof McpRequestError)) return Effect.fail(e)
      return e.kind === "session_expired" ? afterExpiry(ctx, actor, original, input, call, e) : callFailure(actor, input.tool_name, call.timeoutSeconds, e)
    })
    return Effect.map(sent, (result) => outputOf(actor, original, result, call))
  })
