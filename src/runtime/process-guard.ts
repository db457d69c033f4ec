/**
 * Keeps one service's failure from taking the whole store down. An exception thrown from a callback
 * (a socket's data, a child process's pipe, a timer) that nothing catches, or a promise rejection
 * nobody handles, ends a Node process by default: one broken upstream, or one bug in the code that
 * talks to it, would stop every other service and the HTTP API with it, leaving at best a stack
 * trace on stderr. The program (src/main.ts) installs these handlers instead: they log the error,
 * naming the service whose work it came from when that is known, and the store keeps serving.
 *
 * The service is known through an async context: each service's connection work runs in
 * `inService` (src/runtime/adapter.ts), and everything it starts (sockets, child processes, their
 * callbacks; the Streamable HTTP transport starts every request in the context it was created in)
 * carries it along, up to the uncaught exception's handler.
 */
import { AsyncLocalStorage } from "node:async_hooks"
import { log } from "../logging/log.js"

/** Which service the running code works for. */
export interface ServiceContext {
  readonly name: string
  /** "store", or the agent's id. */
  readonly scope: string
}

const current = new AsyncLocalStorage<ServiceContext>()

/** Runs `work`, and everything it starts, as the service's work. */
export const inService = <T>(context: ServiceContext, work: () => T): T => current.run(context, work)

/** The service the running code works for, when known. */
export const currentService = (): ServiceContext | undefined => current.getStore()

const describeService = (context: ServiceContext): string =>
  context.scope === "store" ? `service '${context.name}'` : `service '${context.name}' of agent '${context.scope}'`

const describeError = (error: unknown): string =>
  error instanceof Error ? (error.stack ?? `${error.name}: ${error.message}`) : String(error)

/** Where the guard writes (the store's logger, at error level, by default). */
export interface GuardOptions {
  readonly write?: (text: string) => void
}

let installed: (() => void) | undefined

/**
 * Installs the process's `uncaughtException` and `unhandledRejection` handlers (once; a second call
 * returns the first one's remover). Returns a function that removes them.
 */
export const installProcessGuard = (options: GuardOptions = {}): (() => void) => {
  if (installed !== undefined) return installed
  const write = options.write
  const report = (what: string, error: unknown) => {
    const context = current.getStore()
    const where = context === undefined ? "" : ` in ${describeService(context)}`
    if (write !== undefined) return write(`mcp-store: ${what}${where}; the store keeps serving: ${describeError(error)}\n`)
    const service = context === undefined ? undefined : `${context.scope}/${context.name}`
    log.error(`${what}${where}; the store keeps serving: ${error instanceof Error ? error.message : String(error)}`, { event: what.replace(/ /g, "_"), service }, error)
  }
  const onException = (error: Error) => report("uncaught exception", error)
  const onRejection = (reason: unknown) => report("unhandled promise rejection", reason)
  process.on("uncaughtException", onException)
  process.on("unhandledRejection", onRejection)
  const remove = () => {
    process.off("uncaughtException", onException)
    process.off("unhandledRejection", onRejection)
    installed = undefined
  }
  installed = remove
  return remove
}
