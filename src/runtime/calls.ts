/**
 * The call path of a scope, one pipeline for every entry point (the store and agent REST routes,
 * `/mcp` and `/sse`, the dashboard, the library; a call forwarded to another replica runs it where
 * the call arrived): the tool name resolved to its target (never hijacked by a look-alike name of
 * another service), the arguments checked against the tool's schema, the request sent on the
 * service's connection (waiting for a service still connecting, once more after an expired
 * session), its failure classified once (src/runtime/failures.ts), a record written for every call,
 * and the upstream's result handed back. Written as plain steps over promises (`runCall`), so the
 * common call runs without a fiber; `callTool` is the same pipeline as an Effect.
 */
import type { CallToolResult } from "@modelcontextprotocol/client"
import { Cause, Effect, Exit, FiberId, Option } from "effect"
import { statusOf, type ServiceActorRef } from "../machines/service.js"
import { mcpError, ProtocolErrorCode } from "../mcp/protocol-error.js"
import { McpRequestError, STORE_STOPPING, UpstreamTask, type TaskMethod, type CallHooks, type CallProgress, type UpstreamRequestRelay } from "../mcp/types.js"
import { Cancel, type CancelSignal } from "../domain/cancellation.js"
import { onDemand } from "../domain/on-demand.js"
import { approvalRequired } from "../domain/approval-policy.js"
import { TooMany as TooManyError, ApprovalRefused, CredentialsRequired, type ClusterUnavailable } from "../domain/errors.js"
import { perUserOf } from "./user-credentials.js"
import { requestAsPrincipal } from "./per-user-request.js"
import { NotConnected, notInitializing, requestOnService, waitUntil, type ServiceRequestFailure } from "./service-request.js"
import { resultValue, toolErrorMessage, type Outcome } from "../records/tool-records.js"
import {
  AmbiguousTool,
  InvalidArguments,
  ServiceNotFound,
  ServiceUnavailable,
  ToolNotAllowed,
  ToolChanged,
  ToolNotFound,
  ToolTimeout,
  UpstreamError
} from "../domain/errors.js"
import { outcomeOf, requestFailure, serviceUnavailable as unavailable, taskRequestFailure, type TaskRequestError } from "./failures.js"
import type { ScopeContext } from "./host.js"
import type { HeldRun } from "./input-required.js"
import { log } from "../logging/log.js"
import { EVENTS_PROGRESS_INTERVAL_MS, LatestThrottle, type ProgressEvent } from "./progress.js"
import { ownEntry } from "../machines/supervisor.js"
import { TOOL_SEPARATOR, callableName, heldChange, isConnected, offerReason } from "./service-views.js"
import { serviceToolFilter } from "../domain/tool-filter.js"
import type { McpConnection, ToolInfo } from "../mcp/types.js"
import { didYouMean, MAX_SUGGESTIONS, suggestions } from "../domain/suggest.js"
import { callSpan, newSpanId, traceMeta, type TraceContext } from "../domain/trace-context.js"
import type { SpanAttributes, Tracer } from "../logging/tracing.js"
import { openUpstreamSpan, type UpstreamSpan } from "./upstream-span.js"

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
  /**
   * The span the call's span continues: the store's span of the request when tracing is on, else
   * the caller's trace context (REST headers, or the MCP request's `_meta`).
   */
  readonly trace?: TraceContext | undefined
  /** An asynchronous call's id (src/runtime/async-calls.ts): its progress on `/events` names it. */
  readonly callId?: string | undefined
  /**
   * The caller follows a task itself (a modern MCP client that declared the tasks extension): an
   * upstream's task handle comes back as the outcome's `task` (followed by the caller through the
   * store, src/runtime/task-relay.ts) while the store has room for one more; else, and without it,
   * the store follows the task to its result.
   */
  readonly keepTask?: boolean | undefined
  /**
   * Told the upstream's task id when the call is followed as a task (an asynchronous call keeps it):
   * with it, a call the store's stop interrupts leaves its task running upstream and its record to
   * the call that follows the task again after the restart (`followTask`).
   */
  readonly onTask?: ((taskId: string) => void) | undefined
  /** The upstream task of an earlier call to follow again (its call resumed after a restart), instead of calling the tool. */
  readonly followTask?: string | undefined
  /**
   * Who makes the call, for an approval it may need (README, Approvals): in words for the approver
   * (`agent 'a1' key 'ci'`), and the owner the per-key cap counts (a digest of the key), asked only
   * then (a function: a call that needs none builds nothing). Without it, the scope's label stands for both.
   */
  readonly caller?: CallerOf | undefined
  /**
   * The caller is shown an approval's page by a URL elicitation through its relay (a 2026-07-28
   * client that answers input in rounds); others hear of it by progress only.
   */
  readonly approvalByUrl?: boolean | undefined
  /** Told where the call goes once its target is resolved (an asynchronous call keeps it). */
  readonly onTarget?: ((target: { readonly serviceName: string; readonly original: string; readonly span: TraceContext }) => void) | undefined
}

/**
 * Who makes a call, for an approval: in words for the approver, and its owner (a key's digest) for
 * the per-key cap; the owner also names whose per-user credential a call on a `per_user` service
 * uses (README, Per-user credentials).
 */
export interface ApprovalCaller {
  readonly words: string
  readonly owner: string
}

/** Who makes a call (`CallToolInput.caller`), asked only when the call needs an approval or a per-user credential. */
export type CallerOf = () => ApprovalCaller

/** The relay of a REST call: nobody can answer an upstream's request, declined in words that say why. */
const declinedOverRest: UpstreamRequestRelay = (request) =>
  Promise.reject(mcpError(ProtocolErrorCode.InvalidRequest, `mcp-store declined ${request.method}: the tool call was made through the REST API, which cannot answer it; call the tool from an MCP client that declares the capability`))

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
  readonly span_id: string
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
const callHooks = (ctx: ScopeContext, input: CallToolInput, serviceName: string, original: string, span: TraceContext, started: number) => {
  let events: LatestThrottle<ProgressEvent> | undefined
  const progress = ctx.host.progress
  const own = input.onProgress
  const onTask = input.onTask
  let followed = false
  const hooks: CallHooks = {
    // Only for a caller that follows tasks again (an asynchronous call): nothing added to other calls.
    ...(onTask === undefined
      ? {}
      : {
          onTask: (taskId: string) => {
            followed = true
            onTask(taskId)
          }
        }),
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
        trace_id: span.traceId,
        span_id: span.spanId,
        ...(input.callId === undefined ? {} : { call_id: input.callId }),
        ...p
      })
    }
  }
  return { hooks, close: () => events?.close(), followedTask: () => followed }
}

export { toolErrorMessage }

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

/**
 * The refusal of a call to a tool held by its pins (docs/tool-pins.md): 409 TOOL_CHANGED with what
 * changed; undefined when the tool is not held.
 */
function heldRefusal(ctx: ScopeContext, actor: ServiceActorRef, original: string): ToolChanged | undefined {
  const context = actor.getSnapshot().context
  const held = heldChange(context, original)
  if (held === undefined) return undefined
  const toolName = callableName(context.name, original)
  const what = held.change === "new" ? "it is a new tool of a pinned service" : `its definition changed since it was pinned (${held.changed_fields.join(", ")})`
  return new ToolChanged({
    message: `Tool '${toolName}' is held: ${what}; an operator must accept the change (accept_tool_changes) before it can be called`,
    toolName,
    serviceName: context.name,
    original,
    scope: ctx.label,
    change: held.change,
    changedFields: held.changed_fields,
    diff: held.diff
  })
}

/** Whether a tool is offered to this caller: listed by the views (not hidden nor held) and allowed by the key's list. */
const offered = (ctx: ScopeContext, name: string, definition: Parameters<typeof offerReason>[0], t: ToolInfo, held: Parameters<typeof heldChange>[0]): boolean =>
  offerReason(definition, t) === undefined && heldChange(held, t.name) === undefined && (ctx.gate === undefined || ctx.gate.allows(callableName(name, t.name)))

/** A name not found, with "did you mean" (the closest names this caller may call). */
function toolNotFound(ctx: ScopeContext, toolName: string): ToolNotFound {
  const close = toolSuggestions(ctx, toolName)
  return new ToolNotFound({
    message: `Tool '${toolName}' not found in ${ctx.label === "store" ? "the store" : `agent '${ctx.label}'`}${didYouMean(close)}`,
    toolName,
    scope: ctx.label,
    suggestions: close
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
        const context = actor.getSnapshot().context
        const { name, tools, definition } = context
        for (const t of tools) if (offered(ctx, name, definition, t, context)) yield callableName(name, t.name)
      }
    }
    return suggestions(toolName, callableNames())
  }
  function* originalNames() {
    for (const actor of actors) {
      const context = actor.getSnapshot().context
      const { name, tools, definition } = context
      for (const t of tools) if (offered(ctx, name, definition, t, context)) yield t.name
    }
  }
  const close = new Set(suggestions(toolName, originalNames()))
  const out: Array<string> = []
  for (const actor of actors) {
    const context = actor.getSnapshot().context
    const { name, tools, definition } = context
    for (const t of tools) if (close.has(t.name) && offered(ctx, name, definition, t, context) && out.length < MAX_SUGGESTIONS) out.push(callableName(name, t.name))
  }
  return out
}

function stillConnecting(toolName: string, timeoutSeconds: number): ToolTimeout {
  return new ToolTimeout({
    message: `Tool '${toolName}' did not answer within ${timeoutSeconds} s: its service is still connecting`,
    toolName,
    timeoutSeconds
  })
}

/** What a call can fail with; each face renders it once (src/http/contract-errors.ts, the MCP endpoint, the record's outcome). */
export type CallToolError =
  | ServiceNotFound
  | ToolNotFound
  | ToolNotAllowed
  | ToolChanged
  | AmbiguousTool
  | InvalidArguments
  | UpstreamError
  | ServiceUnavailable
  | ToolTimeout
  | TooManyError
  | ApprovalRefused
  | CredentialsRequired
  | ClusterUnavailable

/** A task an upstream answered a call with, handed to a caller that follows it (`CallToolInput.keepTask`). */
export interface TaskStarted {
  /** The upstream's task as it created it. */
  readonly task: UpstreamTask["task"]
  /** Its entry among the tasks the store's clients follow, under which the call is recorded at its end. */
  readonly relay: string
}

/** What the pipeline gives back: the upstream's result as it came, and where the call went. */
export interface CallOutcome {
  /** The upstream's result (empty when it answered a task the caller follows: `task`). */
  readonly result: CallToolResult
  readonly task?: TaskStarted | undefined
  readonly serviceName: string
  /** The tool's own name on its service. */
  readonly original: string
  readonly durationMs: number
  /** The call's span: its trace id, and the span id the upstream was given as its parent. */
  readonly span: TraceContext
}

/** How a call ended: its outcome, its failure, or interrupted (the caller went away; recorded `cancelled`). */
export type CallExit = Exit.Exit<CallOutcome, CallToolError>

/**
 * Where a call goes, decided from the scope's services as they are now: `Found`; `Wait` for
 * services still connecting (they have no tool list yet), then resolve again; or `Refused`.
 */
export type TargetResolution =
  | { readonly _tag: "Found"; readonly actor: ServiceActorRef; readonly original: string }
  | { readonly _tag: "Wait"; readonly pending: ReadonlyArray<ServiceActorRef> }
  | { readonly _tag: "Refused"; readonly error: CallToolError }

const found = (actor: ServiceActorRef, original: string): TargetResolution => ({ _tag: "Found", actor, original })
const refused = (error: CallToolError): TargetResolution => ({ _tag: "Refused", error })
const initializing = (actor: ServiceActorRef): boolean => statusOf(actor.getSnapshot()) === "initializing"
const hasTool = (actor: ServiceActorRef, original: string): boolean => actor.getSnapshot().context.tools.some((t) => t.name === original)

/**
 * The target of a call. A callable name `<service>__<tool>` whose `<service>` is registered in the
 * scope goes to that service or nowhere: while it is `initializing` (just added, restarting,
 * starting up) the call waits for it; then a connected service without the tool is 404 and one that
 * is not connected 503. It never falls back to another service's tool of that literal name, which
 * could otherwise stand in for it whenever it has no tool list. Any other name is an original name:
 * the one service that offers it (or the one `service_name` names), services still connecting
 * waited for when none does. `expired`: the call's deadline has passed, so a wait is a time-out.
 */
export const resolveTarget = (ctx: ScopeContext, input: CallToolInput, options: { readonly expired: boolean; readonly timeoutSeconds: number }): TargetResolution => {
  const wait = (pending: ReadonlyArray<ServiceActorRef>): TargetResolution =>
    options.expired ? refused(stillConnecting(input.tool_name, options.timeoutSeconds)) : { _tag: "Wait", pending }
  if (input.service_name === undefined) {
    const named = namedServices(ctx, input.tool_name)
    if (named.length > 0) {
      const hit = named.find(({ actor, original }) => hasTool(actor, original))
      if (hit !== undefined) {
        const refusal = notAllowed(ctx, hit.actor, hit.original) ?? heldRefusal(ctx, hit.actor, hit.original)
        return refusal === undefined ? found(hit.actor, hit.original) : refused(refusal)
      }
      const pending = named.map(({ actor }) => actor).filter(initializing)
      if (pending.length > 0) return wait(pending)
      const snapshot = named[0]!.actor.getSnapshot()
      return refused(isConnected(statusOf(snapshot)) ? toolNotFound(ctx, input.tool_name) : unavailable(snapshot))
    }
  }
  let pool: ReadonlyArray<ServiceActorRef>
  if (input.service_name !== undefined) {
    const actor = ctx.findService(input.service_name)
    if (actor === undefined) return refused(ServiceNotFound.of(input.service_name, ctx.label, Object.keys(ctx.actors())))
    pool = [actor]
  } else {
    pool = Object.values(ctx.actors())
  }
  const offering = pool.filter((a) => hasTool(a, input.tool_name))
  // A service whose allow-list (or the caller's) leaves the tool out does not offer it: the name
  // resolves among the others, and is refused only when no other service has it.
  // A tool held by its pins (docs/tool-pins.md) is not offered either: refused TOOL_CHANGED only when no other service offers the name.
  const allowedAll = offering.filter((a) => notAllowed(ctx, a, input.tool_name) === undefined)
  const allowed = allowedAll.filter((a) => heldChange(a.getSnapshot().context, input.tool_name) === undefined)
  if (allowed.length === 1) return found(allowed[0]!, input.tool_name)
  if (allowedAll.length > 0 && allowed.length === 0) return refused(heldRefusal(ctx, allowedAll[0]!, input.tool_name)!)
  if (allowed.length > 1) {
    const candidates = allowed.map((a) => callableName(a.getSnapshot().context.name, input.tool_name))
    return refused(
      new AmbiguousTool({
        message: `Tool '${input.tool_name}' is offered by several services: use one of ${candidates.join(", ")} or give service_name`,
        toolName: input.tool_name,
        candidates
      })
    )
  }
  if (offering.length > 0) return refused(notAllowed(ctx, offering[0]!, input.tool_name)!)
  // Services still connecting have no tool list yet: give them until the deadline. (Looked for
  // only when the name does not resolve: scanning every service costs on each call.)
  const pending = pool.filter(initializing)
  if (pending.length > 0) return wait(pending)
  // The service `service_name` names has no tool list while it is not connected (it may never
  // have been): 503 with its status and next retry, as a callable name gets, not 404.
  const only = input.service_name !== undefined ? pool[0]!.getSnapshot() : undefined
  if (only !== undefined && !isConnected(statusOf(only))) return refused(unavailable(only))
  return refused(toolNotFound(ctx, input.tool_name))
}

/** The time-out and span of one call. */
interface CallTiming {
  readonly started: number
  readonly span: TraceContext
  readonly timeoutSeconds: number
  /** When the call's time-out passes (moved on by the time an approval took: the wait is not the call's). */
  deadline: number
  readonly remaining: () => number
  /** The approval the call had (README, Approvals), for its record. */
  approval?: { readonly approval_id: string; readonly decided_by: string | null } | undefined
  /** Where the call went, once resolved (for its span). */
  target?: { readonly actor: ServiceActorRef; readonly original: string } | undefined
}

/**
 * The check of a call's arguments (src/runtime/arguments.ts, on ajv and RE2), loaded by the first
 * call: half a megabyte of code that a start does not need (a connection loads the same validators
 * for its tools' outputs, src/mcp/connect.ts).
 */
const argumentChecks = onDemand(() => import("./arguments.js"))

/**
 * The call on its service: arguments checked against the tool's schema, then the request on the
 * service's connection (src/runtime/service-request.ts: waited for, sent once more after an
 * expired session), its failure classified once (`requestFailure`).
 */
const send = async (ctx: ScopeContext, actor: ServiceActorRef, original: string, input: CallToolInput, call: CallTiming, hooks: CallHooks, signal: CancelSignal): Promise<Exit.Exit<CallToolResult | UpstreamTask, CallToolError>> => {
  const { argumentProblems } = argumentChecks.loaded ?? (await argumentChecks.load())
  const args = input.args ?? {}
  const tool = actor.getSnapshot().context.tools.find((t) => t.name === original)
  // A task followed again was a call whose arguments were checked when it was made.
  const problems = tool === undefined || input.followTask !== undefined ? [] : argumentProblems(tool, args)
  if (problems.length > 0) {
    return Exit.fail(
      new InvalidArguments({
        message: `Invalid arguments for '${input.tool_name}': ${problems.map((p) => `${p.field} ${p.problem}`).join("; ")}`,
        toolName: input.tool_name,
        upstream: null,
        problems
      })
    )
  }
  // A task followed again was approved (or needed none) when it was made.
  if (input.followTask === undefined && approvalRequired(actor.getSnapshot().context.definition, original)) {
    const refusal = await approval(ctx, input, actor.getSnapshot().context.name, original, args, call, hooks, signal)
    if (refusal !== undefined) return refusal
  }
  const keepTask = input.keepTask === true && ctx.host.tasks.room
  const request = (connection: McpConnection) => {
    const options = { timeoutMs: call.remaining(), signal, hooks, meta: traceMeta(call.span) }
    if (input.followTask !== undefined) return connection.followTask(input.followTask, options)
    return keepTask ? connection.startToolCall(original, args, options) : connection.callTool(original, args, options)
  }
  // The one place a call's connection is chosen: a `per_user` service's call goes through its caller's own.
  // (src/runtime/per-user-request.ts: the caller's owner digest names it, here or on the replica that runs the service).
  const sent =
    perUserOf(actor.getSnapshot().context.definition) === undefined
      ? await requestOnService<CallToolResult | UpstreamTask>(actor, request, { remaining: call.remaining, signal, gate: ctx.host.waiters })
      : await requestAsPrincipal(ctx.host.credentials, actor, input.caller?.().owner, { remaining: call.remaining, signal, gate: ctx.host.waiters, subject: `call of '${input.tool_name}'` }, request)
  if (Exit.isSuccess(sent)) return Exit.succeed(sent.value)
  const failure = Cause.failureOption(sent.cause)
  if (Option.isNone(failure)) return Exit.failCause(sent.cause as Cause.Cause<never>)
  const e = failure.value
  if (e instanceof NotConnected) return Exit.fail(e.stillConnecting ? stillConnecting(input.tool_name, call.timeoutSeconds) : unavailable(e.snapshot))
  if (!(e instanceof McpRequestError)) return Exit.fail(e)
  const classified = requestFailure(e, { kind: "call", toolName: input.tool_name, serviceName: actor.getSnapshot().context.name, timeoutSeconds: call.timeoutSeconds })
  return classified === undefined ? Exit.interrupt(FiberId.none) : Exit.fail(classified)
}

/** How often a call waiting for its approval tells its caller so again (a progress: it keeps an MCP client's request alive). */
const APPROVAL_REMINDER_MS = 10_000

/**
 * The wait of a call for its approval (src/runtime/approvals.ts): asked with the caller's words,
 * announced as a progress (again every 10 s) and, to a caller that answers input in rounds, as a URL
 * elicitation of the approval page; undefined once approved (the call's time-out then starts
 * again: the wait is not the call's), else how the call ends: denied or timed out (ApprovalRefused),
 * refused past a cap (TooMany), or cancelled with its caller. Bounded by `--approval-timeout` and
 * `--max-call-seconds`.
 */
const approval = async (
  ctx: ScopeContext,
  input: CallToolInput,
  serviceName: string,
  original: string,
  args: Record<string, unknown>,
  call: CallTiming,
  hooks: CallHooks,
  signal: CancelSignal
): Promise<Exit.Exit<never, CallToolError> | undefined> => {
  const limits = ctx.host.limits
  const timeoutMs = Math.min(limits.approvalTimeoutSeconds, limits.maxCallSeconds) * 1000
  const toolName = callableName(serviceName, original)
  const caller = input.caller?.() ?? { words: ctx.label === "store" ? "a caller of the store" : `a caller of agent '${ctx.label}'`, owner: `scope\0${ctx.label}` }
  const waitStart = performance.now()
  const asked = ctx.host.approvals.ask(
    { scope: ctx.label, serviceName, original, toolName, args, caller: caller.words, owner: caller.owner, traceId: call.span.traceId, callId: input.callId },
    timeoutMs,
    signal
  )
  if (asked instanceof TooManyError) return Exit.fail(asked)
  const { view } = asked
  const where = view.approval_url ?? `GET /for_store/approvals (approval ${view.approval_id})`
  const tell = () => hooks.onProgress?.({ progress: 0, message: `waiting for approval ${view.approval_id}: ${where}` })
  tell()
  const reminder = setInterval(tell, APPROVAL_REMINDER_MS)
  reminder.unref()
  if (input.approvalByUrl === true && view.approval_url !== null && hooks.relay !== undefined) {
    // The page's URL as the 2025-11-25 URL elicitation; its answer only says whether the person went
    // there: a decline or cancel denies the call, an accept leaves the decision to the page. It stays
    // asked after the decision, until the call ends (the held call then forgets it): the client's
    // retry answers it whenever it comes, and is never refused for answering a request withdrawn.
    const shown = new AbortController()
    hooks
      .relay(
        {
          method: "elicitation/create",
          params: { mode: "url", elicitationId: view.approval_id, url: view.approval_url, message: `The call of ${toolName} waits for an approval: open the page to approve or deny it (arguments digest ${view.arguments_digest.slice(0, 12)})` }
        },
        { signal: shown.signal, timeoutMs }
      )
      .then(
        (answer) => {
          if (answer["action"] === "decline" || answer["action"] === "cancel") ctx.host.approvals.decide(view.approval_id, "deny", `the caller (${String(answer["action"])} of the approval page)`)
        },
        () => undefined
      )
  }
  const end = await asked.ended.finally(() => clearInterval(reminder))
  switch (end.decision) {
    case "approved":
      call.approval = { approval_id: view.approval_id, decided_by: end.by }
      call.deadline += performance.now() - waitStart
      return undefined
    case "denied":
      call.approval = { approval_id: view.approval_id, decided_by: end.by }
      return Exit.fail(new ApprovalRefused({ message: `The call of '${toolName}' was denied by ${end.by} (approval ${view.approval_id})`, reason: "denied", approvalId: view.approval_id, toolName, serviceName, by: end.by }))
    case "timeout":
      call.approval = { approval_id: view.approval_id, decided_by: null }
      return Exit.fail(new ApprovalRefused({ message: `The call of '${toolName}' was not approved within ${Math.round(timeoutMs / 1000)} s (approval ${view.approval_id})`, reason: "timeout", approvalId: view.approval_id, toolName, serviceName, by: null }))
    case "cancelled":
      call.approval = { approval_id: view.approval_id, decided_by: null }
      return Exit.interrupt(FiberId.none)
  }
}

/** How a call ended, in the record's words: its outcome and its error (null for a success). */
const endingOf = (exit: Exit.Exit<CallToolResult, CallToolError>, signal?: CancelSignal): { readonly outcome: Outcome; readonly error: string | null } => {
  if (Exit.isSuccess(exit)) {
    const r = exit.value
    return r.isError === true ? { outcome: "tool_error", error: toolErrorMessage({ content: r.content ?? [] }) } : { outcome: "success", error: null }
  }
  const failure = Cause.failureOption(exit.cause)
  if (Option.isSome(failure)) return { outcome: outcomeOf(failure.value), error: failure.value.message }
  // Interrupted: the store stopped, or the caller cancelled the call or went away (the upstream was sent notifications/cancelled).
  if (Cause.isInterruptedOnly(exit.cause) && signal?.reason === STORE_STOPPING) return { outcome: "interrupted", error: "the store stopped while the call ran" }
  if (Cause.isInterruptedOnly(exit.cause)) return { outcome: "cancelled", error: "the caller cancelled the call or went away" }
  return { outcome: "transport_error", error: String(Cause.squash(exit.cause)) }
}

/**
 * Takes the record of a call that reached its service (or was refused by an allow-list); a
 * promise when its line is not in the file yet (undefined when it is).
 */
const record = (
  ctx: ScopeContext,
  input: CallToolInput,
  target: { readonly serviceName: string; readonly original: string },
  call: CallTiming,
  durationMs: number,
  exit: Exit.Exit<CallToolResult, CallToolError>,
  signal?: CancelSignal
): Promise<unknown> | undefined => {
  const { outcome, error } = endingOf(exit, signal)
  const result = Exit.isSuccess(exit) ? resultValue(exit.value) : null
  return ctx.host.records
    .record({
      scope: ctx.scope.kind,
      agent_id: ctx.scope.kind === "agent" ? ctx.scope.agentId : null,
      service_name: target.serviceName,
      tool_name: target.original,
      params: input.args ?? {},
      result,
      outcome,
      error,
      duration_ms: durationMs,
      trace_id: call.span.traceId,
      span_id: call.span.spanId,
      ...(call.approval === undefined ? {} : { approval: call.approval })
    })
    .written?.catch((e: unknown) => log.error(`a tool-call record could not be written: ${e instanceof Error ? e.message : String(e)}`, { event: "record_failed", trace_id: call.span.traceId }))
}

const durationSince = (started: number): number => Math.round((performance.now() - started) * 100) / 100

/**
 * A call refused by an allow-list: a log line (the scope, the tool, the list that refused it; never
 * a key) and a record with the outcome `tool_not_allowed`, on disk before the refusal is answered.
 */
const recordRefusal = async (ctx: ScopeContext, input: CallToolInput, e: ToolNotAllowed | ToolChanged, call: CallTiming): Promise<void> => {
  log.warn(`refused a call in ${ctx.label === "store" ? "the store" : `agent '${ctx.label}'`}: ${e.message}`, {
    event: e instanceof ToolChanged ? "tool_changed_refused" : "tool_not_allowed",
    scope: ctx.label,
    service: e.serviceName,
    tool: e.original,
    trace_id: call.span.traceId
  })
  await record(ctx, input, { serviceName: e.serviceName, original: e.original }, call, durationSince(call.started), Exit.fail(e))
}

/**
 * The span of a call, once it ended (tracing on only): `tools/call <tool>` from the store to the
 * upstream (a client span; its id is the one the upstream was sent as its parent and the record
 * keeps), or `tools/call` alone for a call refused before any upstream was asked. The attributes
 * are the OpenTelemetry conventions for MCP and GenAI tools, and the store's own under `mcp_store.`.
 */
const traceCall = (tracer: Tracer, ctx: ScopeContext, input: CallToolInput, call: CallTiming, exit: CallExit, signal: CancelSignal): void => {
  const target = call.target
  const snapshot = target?.actor.getSnapshot()
  const connection = snapshot?.context.connection
  const { outcome, error } = endingOf(Exit.map(exit, (o) => o.result), signal)
  const failure = Exit.isFailure(exit) ? Option.getOrUndefined(Cause.failureOption(exit.cause)) : undefined
  const attributes: SpanAttributes = {
    "mcp.method.name": "tools/call",
    "gen_ai.operation.name": "execute_tool",
    "gen_ai.tool.name": target?.original ?? input.tool_name,
    "mcp.protocol.version": connection?.protocolVersion,
    "network.transport": connection === undefined ? undefined : connection.transportType === "stdio" ? "pipe" : "tcp",
    "rpc.response.status_code": failure instanceof UpstreamError && failure.code !== undefined ? String(failure.code) : undefined,
    // The tool's own error is `tool_error` (the MCP conventions' word); a failure of the store's, its class.
    "error.type": outcome === "success" ? undefined : outcome === "tool_error" || outcome === "cancelled" || failure === undefined ? outcome : failure._tag,
    "mcp_store.scope": ctx.label,
    "mcp_store.service.name": snapshot?.context.name,
    "mcp_store.tool.callable_name": input.tool_name,
    "mcp_store.outcome": outcome
  }
  tracer.record({
    name: target === undefined ? "tools/call" : `tools/call ${target.original}`,
    kind: target === undefined ? "internal" : "client",
    context: call.span,
    startMs: call.started,
    endMs: performance.now(),
    attributes,
    ...(outcome === "success" ? {} : { error: error ?? outcome })
  })
}

/** The span of a wait for services still connecting, under the call's span (tracing on only). */
const traceWait = (tracer: Tracer, call: CallTiming, pending: ReadonlyArray<ServiceActorRef>, startMs: number, ending: "ready" | "timeout" | "cancelled"): void => {
  const names = pending.map((a) => a.getSnapshot().context.name)
  tracer.record({
    name: names.length === 1 ? `wait ${names[0]}` : "wait",
    kind: "internal",
    context: { traceId: call.span.traceId, spanId: newSpanId(), parentSpanId: call.span.spanId, flags: call.span.flags },
    startMs,
    endMs: performance.now(),
    attributes: { "mcp_store.wait.services": names.slice(0, 10).join(","), "mcp_store.wait.until": "connected", "mcp_store.outcome": ending, "error.type": ending === "ready" ? undefined : ending },
    ...(ending === "ready" ? {} : { error: ending === "timeout" ? "the call's time-out passed while its service was connecting" : "the call ended while waiting" })
  })
}

/** The pipeline; see `runCall`. */
const pipeline = (ctx: ScopeContext, input: CallToolInput, signal: CancelSignal): Promise<CallExit> => {
  const timeoutSeconds = callTimeoutSeconds(ctx, input)
  const started = performance.now()
  const deadline = started + timeoutSeconds * 1000
  const call: CallTiming = { started, span: callSpan(input.trace), timeoutSeconds, deadline, remaining: () => Math.max(0, call.deadline - performance.now()) }
  const tracer = ctx.host.tracer
  // Tracing off: the steps' own promise, no layer added.
  if (!tracer.enabled) return steps(ctx, input, signal, call, undefined)
  return steps(ctx, input, signal, call, tracer).then((exit) => {
    traceCall(tracer, ctx, input, call, exit, signal)
    return exit
  })
}

/** The steps of a call: resolve (waiting for services still connecting), send, record. */
const steps = async (ctx: ScopeContext, input: CallToolInput, signal: CancelSignal, call: CallTiming, tracer: Tracer | undefined): Promise<CallExit> => {
  const { started, timeoutSeconds } = call
  let target = resolveTarget(ctx, input, { expired: timeoutSeconds <= 0, timeoutSeconds })
  while (target._tag === "Wait") {
    const waitStart = performance.now()
    const waited = await waitUntil(target.pending, notInitializing, { timeoutMs: call.remaining(), gate: ctx.host.waiters }, signal)
    if (tracer !== undefined) traceWait(tracer, call, target.pending, waitStart, Exit.isFailure(waited) ? "cancelled" : waited.value ? "timeout" : "ready")
    if (Exit.isFailure(waited)) return Exit.failCause(waited.cause)
    target = resolveTarget(ctx, input, { expired: waited.value || call.remaining() <= 0, timeoutSeconds })
  }
  if (target._tag === "Refused") {
    if (target.error instanceof ToolNotAllowed || target.error instanceof ToolChanged) await recordRefusal(ctx, input, target.error, call)
    return Exit.fail(target.error)
  }

  const { actor, original } = target
  call.target = target
  const serviceName = actor.getSnapshot().context.name
  input.onTarget?.({ serviceName, original, span: call.span })
  // Counted in flight from the request to its end; the record is taken however the call ends.
  ctx.host.inFlightCalls += 1
  const { hooks, close, followedTask } = callHooks(ctx, input, serviceName, original, call.span, started)
  let answered: Exit.Exit<CallToolResult | UpstreamTask, CallToolError>
  try {
    answered = await send(ctx, actor, original, input, call, hooks, signal)
  } catch (e) {
    answered = Exit.die(e) // a bug: a defect, recorded and answered as one
  } finally {
    close()
    ctx.host.inFlightCalls -= 1
  }
  const durationMs = durationSince(started)
  if (Exit.isSuccess(answered) && answered.value instanceof UpstreamTask) {
    // The caller follows the task: the call is recorded when its end is seen.
    const { task } = answered.value
    const relay = ctx.host.tasks.follow({ scope: ctx.scope, serviceName, original, params: input.args ?? {}, span: call.span, started }, task["ttlMs"])
    return Exit.succeed({ result: { content: [] }, task: { task, relay }, serviceName, original, durationMs, span: call.span })
  }
  const sent = answered as Exit.Exit<CallToolResult, CallToolError>
  // A task left running upstream at the store's stop is recorded by the call that follows it again.
  const left = signal.aborted && signal.reason === STORE_STOPPING && followedTask()
  const written = left ? undefined : record(ctx, input, { serviceName, original }, call, durationMs, sent, signal)
  if (written !== undefined) await written
  return Exit.map(sent, (result): CallOutcome => ({ result, serviceName, original, durationMs, span: call.span }))
}

/**
 * Calls a tool: the one pipeline of every call (resolve the target, check the arguments, send on
 * the connection, classify a failure, record, hand back the upstream's result). Waits for an
 * `initializing` service (up to the time-out); a service that is not connected fails with
 * ServiceUnavailable; an expired session is re-established and the call sent once more. Every
 * call that reached a service is recorded, however it ends (`signal` aborted included): the record
 * is taken at once (counted, in memory, to its listeners) and its line written to the file, at
 * once or, while the file is being maintained, right after. The exit waits for that write: a call
 * whose answer a client has seen is on disk, even if the store is killed right after. Never
 * rejects; the common call (a connected service) runs without a fiber.
 */
export const runCall = (ctx: ScopeContext, input: CallToolInput, signal: CancelSignal = new Cancel()): Promise<CallExit> =>
  pipeline(ctx, input, signal).catch((e: unknown) => Exit.die(e))

/**
 * The call as a held call runs it (src/runtime/input-required.ts): its upstream's requests go to
 * the held call's relay, its progress to the held call (which hands it to the request waiting).
 */
export const heldCallRun =
  (ctx: ScopeContext, input: CallToolInput): HeldRun<CallExit> =>
  (hooks, signal) =>
    runCall(ctx, { ...input, relay: hooks.relay, onProgress: hooks.onProgress }, signal)

/** `runCall` as an Effect: interrupting it cancels the call, and ends once the call's record is taken. */
export const callOutcome = (ctx: ScopeContext, input: CallToolInput): Effect.Effect<CallOutcome, CallToolError> =>
  Effect.async<CallOutcome, CallToolError>((resume) => {
    const cancel = new Cancel()
    const exit = runCall(ctx, input, cancel)
    void exit.then(resume)
    return Effect.asVoid(
      Effect.promise(() => {
        cancel.abort()
        return exit
      })
    )
  })

/** The answer of a call to the library and the REST API (call_tool's fields), from its outcome. */
export const callToolOutput = (outcome: CallOutcome): CallToolOutput => {
  const r = outcome.result
  return {
    result: resultValue(r),
    content: r.content ?? [],
    structured_content: (r.structuredContent as Record<string, unknown> | undefined) ?? null,
    is_error: r.isError === true,
    tool_name: callableName(outcome.serviceName, outcome.original),
    original_name: outcome.original,
    service_name: outcome.serviceName,
    duration_ms: outcome.durationMs,
    trace_id: outcome.span.traceId,
    span_id: outcome.span.spanId
  }
}

/** Calls a tool (`runCall` as an Effect), answering the library's and the REST API's output. */
export const callTool = (ctx: ScopeContext, input: CallToolInput): Effect.Effect<CallToolOutput, CallToolError> => Effect.map(callOutcome(ctx, input), callToolOutput)

/** A relayed task request's time-out (ms): tasks/get, tasks/update and tasks/cancel answer at once. */
const TASK_REQUEST_TIMEOUT_MS = 30_000

/**
 * One request of the tasks extension, relayed to the upstream of service `serviceName` of the
 * scope (its connection waited for as a call's is): the upstream's answer, or the failure as the
 * store's error (the upstream's own JSON-RPC error kept in `UpstreamError.code`: a task it does not
 * know is its -32602). A `per_user` service's task request goes, as its call did, through the
 * connection of `principal` (the caller's owner digest the task handle keeps; in replica mode
 * through the replica that runs the service, naming it): an upstream that keeps tasks per
 * connection or per user knows the task there only. Without a principal it is refused
 * `CredentialsRequired`, as a call is.
 */
export const relayTaskRequest = async (
  ctx: ScopeContext,
  serviceName: string,
  method: TaskMethod,
  params: Record<string, unknown>,
  signal: AbortSignal,
  trace?: TraceContext,
  principal?: string
): Promise<Exit.Exit<Record<string, unknown>, TaskRequestError>> => {
  const actor = ctx.findService(serviceName)
  if (actor === undefined) return Exit.fail(new UpstreamError({ message: `the service '${serviceName}' of the task is gone`, outcome: "protocol_error", serviceName, code: -32602 }))
  const deadline = performance.now() + TASK_REQUEST_TIMEOUT_MS
  const remaining = () => Math.max(0, deadline - performance.now())
  const tracer = ctx.host.tracer
  // Tracing on: the request's client span under the served request's (`trace`), its context in the upstream's `_meta`.
  let traced: UpstreamSpan | undefined
  const request = (connection: McpConnection) => {
    traced ??= tracer.enabled ? openUpstreamSpan(tracer, trace, { method, scope: ctx.label, serviceName, connection }) : undefined
    return connection.taskRequest(method, params, { timeoutMs: remaining(), signal, meta: traced?.meta })
  }
  // The same choice of connection as the task's call (`send`): a `per_user` service's, the caller's own.
  const sent =
    perUserOf(actor.getSnapshot().context.definition) === undefined
      ? await requestOnService(actor, request, { remaining, signal, gate: ctx.host.waiters })
      : await requestAsPrincipal(ctx.host.credentials, actor, principal, { remaining, signal, gate: ctx.host.waiters, subject: `${method} of a task of '${serviceName}'` }, request)
  const exit = taskExit(sent, serviceName)
  traced?.end(exit)
  return exit
}

/** How a relayed task request ended, as the store's error (`taskRequestFailure`). */
const taskExit = (sent: Exit.Exit<Record<string, unknown>, unknown>, serviceName: string): Exit.Exit<Record<string, unknown>, TaskRequestError> => {
  if (Exit.isSuccess(sent)) return Exit.succeed(sent.value)
  const failure = Cause.failureOption(sent.cause)
  return Option.isNone(failure) ? Exit.failCause(sent.cause as Cause.Cause<never>) : Exit.fail(taskRequestFailure(failure.value, serviceName))
}
