/**
 * Effects run as Promises for the store's Promise API (`ScopeApi`, `Store`): the value, or the
 * failure itself (a `ServiceNotFound`, a `TooMany`...), not Effect's `FiberFailure` wrapper, so a
 * library user catches the store's errors as they are documented. `signal` interrupts the effect.
 */
import { Cause, Effect, Exit, Layer, Logger, LogLevel, Runtime } from "effect"
import { StoreLoggerLive } from "../logging/log.js"

/**
 * The runtime of effects run outside the server's own: Effect's default one with the store's
 * Logger (src/logging/log.ts), which applies the process's level itself.
 */
export const loggedRuntime: Runtime.Runtime<never> = Effect.runSync(
  Effect.runtime<never>().pipe(Effect.provide(Layer.merge(StoreLoggerLive, Logger.minimumLogLevel(LogLevel.Debug))))
)
const runExit = Runtime.runPromiseExit(loggedRuntime)
const runSyncExit = Runtime.runSyncExit(loggedRuntime)

export const runToPromise = <A, E>(effect: Effect.Effect<A, E>, signal?: AbortSignal): Promise<A> =>
  runExit(effect, signal === undefined ? undefined : { signal }).then((exit) => {
    if (Exit.isSuccess(exit)) return exit.value
    throw Cause.squash(exit.cause)
  })

/** How an effect ended, failure included (never rejects); `signal` interrupts it. */
export const runToExit = <A, E>(effect: Effect.Effect<A, E>, signal?: AbortSignal): Promise<Exit.Exit<A, E>> =>
  runExit(effect, signal === undefined ? undefined : { signal })

/** A synchronous effect's value, or its failure thrown as it is (for the Promise API's synchronous reads). */
export const runToValue = <A, E>(effect: Effect.Effect<A, E>): A => {
  const exit = runSyncExit(effect)
  if (Exit.isSuccess(exit)) return exit.value
  throw Cause.squash(exit.cause)
}

/**
 * A synchronous step that throws the store's errors on purpose: they become the effect's failures;
 * anything else thrown is a bug (a defect).
 */
export const attempt = <A, E>(step: () => A, isFailure: (e: unknown) => e is E): Effect.Effect<A, E> =>
  Effect.suspend(() => {
    try {
      return Effect.succeed(step())
    } catch (e) {
      return isFailure(e) ? Effect.fail(e) : Effect.die(e)
    }
  })
