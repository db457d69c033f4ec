/**
 * A module loaded on its first need rather than at start (the program is bundled in chunks, and a
 * dynamic import() is where a chunk begins): code that only some routes, options or services use
 * costs a start nothing. `loaded` is the module once it has come, so that the code needing it goes on
 * at once, without waiting a turn, from then on (`demand.loaded ?? (await demand.load())`); `load()`
 * imports it, once for all who wait. A failed import fails those who waited, as any other failure of
 * what they were doing, and the next need tries again.
 */
export interface OnDemand<M> {
  readonly loaded: M | undefined
  readonly load: () => Promise<M>
}

export const onDemand = <M>(importModule: () => Promise<M>): OnDemand<M> => {
  let loaded: M | undefined
  let loading: Promise<M> | undefined
  return {
    get loaded() {
      return loaded
    },
    load: () =>
      (loading ??= importModule().then(
        (m) => (loaded = m),
        (e: unknown) => {
          loading = undefined
          throw e
        }
      ))
  }
}
