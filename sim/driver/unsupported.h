/* simcuda: driver functions that cuda.h names but simcuda does not
 * simulate (arrays, textures, graphs, linking, external semaphores, stream
 * memory operations, managed memory, memory pools beyond the default). They
 * are exported, and answered by cuGetProcAddress, and return
 * CUDA_ERROR_NOT_SUPPORTED. The one list, used by procs.c (the table) and
 * unsupported.c (the definitions):
 *   U(base name, version introduced, symbol)
 *   UP(base name, version introduced, symbol, per-thread variant) */
#ifndef SIM_DRIVER_UNSUPPORTED_H
#define SIM_DRIVER_UNSUPPORTED_H

#define SIM_UNSUPPORTED(U, UP)                                                          \
    U(cuMemAdvise, 12020,                                                               \
      cuMemAdvise_v2)                                                                   \
    UP(cuMemPrefetchAsync, 12020, cuMemPrefetchAsync_v2, cuMemPrefetchAsync_v2_ptsz)    \
    UP(cuMemPrefetchBatchAsync, 13000, cuMemPrefetchBatchAsync, cuMemPrefetchBatchAsync_ptsz) \
    UP(cuMemDiscardBatchAsync, 13000, cuMemDiscardBatchAsync, cuMemDiscardBatchAsync_ptsz) \
    UP(cuMemDiscardAndPrefetchBatchAsync, 13000, cuMemDiscardAndPrefetchBatchAsync,     \
       cuMemDiscardAndPrefetchBatchAsync_ptsz)                                          \
    UP(cuMemcpyDtoA, 3020, cuMemcpyDtoA_v2, cuMemcpyDtoA_v2_ptds)                       \
    UP(cuMemcpyAtoD, 3020, cuMemcpyAtoD_v2, cuMemcpyAtoD_v2_ptds)                       \
    UP(cuMemcpyHtoA, 3020, cuMemcpyHtoA_v2, cuMemcpyHtoA_v2_ptds)                       \
    UP(cuMemcpyAtoH, 3020, cuMemcpyAtoH_v2, cuMemcpyAtoH_v2_ptds)                       \
    UP(cuMemcpyAtoA, 3020, cuMemcpyAtoA_v2, cuMemcpyAtoA_v2_ptds)                       \
    UP(cuMemcpyHtoAAsync, 3020, cuMemcpyHtoAAsync_v2, cuMemcpyHtoAAsync_v2_ptsz)        \
    UP(cuMemcpyAtoHAsync, 3020, cuMemcpyAtoHAsync_v2, cuMemcpyAtoHAsync_v2_ptsz)        \
    UP(cuMemcpy3D, 3020, cuMemcpy3D_v2, cuMemcpy3D_v2_ptds)                             \
    UP(cuMemcpy3DAsync, 3020, cuMemcpy3DAsync_v2, cuMemcpy3DAsync_v2_ptsz)              \
    UP(cuMemcpyBatchAsync, 13000, cuMemcpyBatchAsync_v2, cuMemcpyBatchAsync_v2_ptsz)    \
    UP(cuMemcpy3DBatchAsync, 13000, cuMemcpy3DBatchAsync_v2, cuMemcpy3DBatchAsync_v2_ptsz) \
    UP(cuMemcpy3DPeer, 4000, cuMemcpy3DPeer, cuMemcpy3DPeer_ptds)                       \
    UP(cuMemcpy3DPeerAsync, 4000, cuMemcpy3DPeerAsync, cuMemcpy3DPeerAsync_ptsz)        \
    U(cuArrayCreate, 3020,                                                              \
      cuArrayCreate_v2)                                                                 \
    U(cuArrayGetDescriptor, 3020,                                                       \
      cuArrayGetDescriptor_v2)                                                          \
    U(cuArray3DCreate, 3020,                                                            \
      cuArray3DCreate_v2)                                                               \
    U(cuArray3DGetDescriptor, 3020,                                                     \
      cuArray3DGetDescriptor_v2)                                                        \
    U(cuTexRefSetAddress, 3020,                                                         \
      cuTexRefSetAddress_v2)                                                            \
    U(cuTexRefGetAddress, 3020,                                                         \
      cuTexRefGetAddress_v2)                                                            \
    U(cuTexRefSetAddress2D, 4010,                                                       \
      cuTexRefSetAddress2D_v3)                                                          \
    U(cuGraphicsResourceGetMappedPointer, 3020,                                         \
      cuGraphicsResourceGetMappedPointer_v2)                                            \
    U(cuGraphicsResourceSetMapFlags, 6050,                                              \
      cuGraphicsResourceSetMapFlags_v2)                                                 \
    UP(cuGraphicsMapResources, 3000, cuGraphicsMapResources, cuGraphicsMapResources_ptsz) \
    UP(cuGraphicsUnmapResources, 3000, cuGraphicsUnmapResources, cuGraphicsUnmapResources_ptsz) \
    U(cuLinkCreate, 6050,                                                               \
      cuLinkCreate_v2)                                                                  \
    U(cuLinkAddData, 6050,                                                              \
      cuLinkAddData_v2)                                                                 \
    U(cuLinkAddFile, 6050,                                                              \
      cuLinkAddFile_v2)                                                                 \
    U(cuIpcOpenMemHandle, 11000,                                                        \
      cuIpcOpenMemHandle_v2)                                                            \
    UP(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph,                 \
       cuStreamBeginCaptureToGraph_ptsz)                                                \
    UP(cuStreamUpdateCaptureDependencies, 12030, cuStreamUpdateCaptureDependencies_v2,  \
       cuStreamUpdateCaptureDependencies_v2_ptsz)                                       \
    UP(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams,               \
       cuGraphInstantiateWithParams_ptsz)                                               \
    U(cuGraphExecUpdate, 12000,                                                         \
      cuGraphExecUpdate_v2)                                                             \
    U(cuGraphAddKernelNode, 12000,                                                      \
      cuGraphAddKernelNode_v2)                                                          \
    U(cuGraphKernelNodeGetParams, 12000,                                                \
      cuGraphKernelNodeGetParams_v2)                                                    \
    U(cuGraphKernelNodeSetParams, 12000,                                                \
      cuGraphKernelNodeSetParams_v2)                                                    \
    U(cuGraphExecKernelNodeSetParams, 12000,                                            \
      cuGraphExecKernelNodeSetParams_v2)                                                \
    U(cuGraphGetEdges, 12030,                                                           \
      cuGraphGetEdges_v2)                                                               \
    U(cuGraphNodeGetDependencies, 12030,                                                \
      cuGraphNodeGetDependencies_v2)                                                    \
    U(cuGraphNodeGetDependentNodes, 12030,                                              \
      cuGraphNodeGetDependentNodes_v2)                                                  \
    U(cuGraphAddDependencies, 12030,                                                    \
      cuGraphAddDependencies_v2)                                                        \
    U(cuGraphRemoveDependencies, 12030,                                                 \
      cuGraphRemoveDependencies_v2)                                                     \
    U(cuGraphAddNode, 12030,                                                            \
      cuGraphAddNode_v2)                                                                \
    UP(cuGraphUpload, 11010, cuGraphUpload, cuGraphUpload_ptsz)                         \
    UP(cuStreamAttachMemAsync, 6000, cuStreamAttachMemAsync, cuStreamAttachMemAsync_ptsz) \
    UP(cuStreamCopyAttributes, 11000, cuStreamCopyAttributes, cuStreamCopyAttributes_ptsz) \
    UP(cuStreamGetAttribute, 11000, cuStreamGetAttribute, cuStreamGetAttribute_ptsz)   \
    UP(cuStreamSetAttribute, 11000, cuStreamSetAttribute, cuStreamSetAttribute_ptsz)   \
    UP(cuSignalExternalSemaphoresAsync, 10000, cuSignalExternalSemaphoresAsync,         \
       cuSignalExternalSemaphoresAsync_ptsz)                                            \
    UP(cuWaitExternalSemaphoresAsync, 10000, cuWaitExternalSemaphoresAsync,             \
       cuWaitExternalSemaphoresAsync_ptsz)                                              \
    UP(cuMemMapArrayAsync, 11010, cuMemMapArrayAsync, cuMemMapArrayAsync_ptsz)          \
    UP(cuMemAllocFromPoolAsync, 11020, cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync_ptsz) \
    UP(cuMemBatchDecompressAsync, 12060, cuMemBatchDecompressAsync,                     \
       cuMemBatchDecompressAsync_ptsz)                                                  \
    SIM_UNSUPPORTED_PLAIN(U)                                                            \
    SIM_UNSUPPORTED_OLD_ABI(U, UP)

/* The other functions cuda.h declares under their own (unversioned) names,
 * with the CUDA version that introduced each (cudaTypedefs.h), so that a
 * program written against cuda.h links and is told CUDA_ERROR_NOT_SUPPORTED.
 * (The first, 32-bit-size versions of functions cuda.h renames to _v2 are
 * not provided.) */
#define SIM_UNSUPPORTED_PLAIN(U) \
    U(cuArrayDestroy, 2000,                                                             \
      cuArrayDestroy)                                                                   \
    U(cuArrayGetMemoryRequirements, 11060,                                              \
      cuArrayGetMemoryRequirements)                                                     \
    U(cuArrayGetPlane, 11020,                                                           \
      cuArrayGetPlane)                                                                  \
    U(cuArrayGetSparseProperties, 11010,                                                \
      cuArrayGetSparseProperties)                                                       \
    U(cuCheckpointProcessCheckpoint, 12080,                                             \
      cuCheckpointProcessCheckpoint)                                                    \
    U(cuCheckpointProcessGetRestoreThreadId, 12080,                                     \
      cuCheckpointProcessGetRestoreThreadId)                                            \
    U(cuCheckpointProcessGetState, 12080,                                               \
      cuCheckpointProcessGetState)                                                      \
    U(cuCheckpointProcessLock, 12080,                                                   \
      cuCheckpointProcessLock)                                                          \
    U(cuCheckpointProcessRestore, 12080,                                                \
      cuCheckpointProcessRestore)                                                       \
    U(cuCheckpointProcessUnlock, 12080,                                                 \
      cuCheckpointProcessUnlock)                                                        \
    U(cuCoredumpGetAttribute, 12010,                                                    \
      cuCoredumpGetAttribute)                                                           \
    U(cuCoredumpGetAttributeGlobal, 12010,                                              \
      cuCoredumpGetAttributeGlobal)                                                     \
    U(cuCoredumpSetAttribute, 12010,                                                    \
      cuCoredumpSetAttribute)                                                           \
    U(cuCoredumpSetAttributeGlobal, 12010,                                              \
      cuCoredumpSetAttributeGlobal)                                                     \
    U(cuCtxAttach, 2000,                                                                \
      cuCtxAttach)                                                                      \
    U(cuCtxDetach, 2000,                                                                \
      cuCtxDetach)                                                                      \
    U(cuCtxFromGreenCtx, 12040,                                                         \
      cuCtxFromGreenCtx)                                                                \
    U(cuCtxGetDevResource, 12040,                                                       \
      cuCtxGetDevResource)                                                              \
    U(cuCtxGetExecAffinity, 11040,                                                      \
      cuCtxGetExecAffinity)                                                             \
    U(cuCtxGetSharedMemConfig, 4020,                                                    \
      cuCtxGetSharedMemConfig)                                                          \
    U(cuCtxRecordEvent, 12050,                                                          \
      cuCtxRecordEvent)                                                                 \
    U(cuCtxResetPersistingL2Cache, 11000,                                               \
      cuCtxResetPersistingL2Cache)                                                      \
    U(cuCtxSetSharedMemConfig, 4020,                                                    \
      cuCtxSetSharedMemConfig)                                                          \
    U(cuCtxWaitEvent, 12050,                                                            \
      cuCtxWaitEvent)                                                                   \
    U(cuDestroyExternalMemory, 10000,                                                   \
      cuDestroyExternalMemory)                                                          \
    U(cuDestroyExternalSemaphore, 10000,                                                \
      cuDestroyExternalSemaphore)                                                       \
    U(cuDevResourceGenerateDesc, 12040,                                                 \
      cuDevResourceGenerateDesc)                                                        \
    U(cuDevSmResourceSplitByCount, 12040,                                               \
      cuDevSmResourceSplitByCount)                                                      \
    U(cuDeviceGetDefaultMemPool, 11020,                                                 \
      cuDeviceGetDefaultMemPool)                                                        \
    U(cuDeviceGetDevResource, 12040,                                                    \
      cuDeviceGetDevResource)                                                           \
    U(cuDeviceGetExecAffinitySupport, 11040,                                            \
      cuDeviceGetExecAffinitySupport)                                                   \
    U(cuDeviceGetGraphMemAttribute, 11040,                                              \
      cuDeviceGetGraphMemAttribute)                                                     \
    U(cuDeviceGetHostAtomicCapabilities, 13000,                                         \
      cuDeviceGetHostAtomicCapabilities)                                                \
    U(cuDeviceGetLuid, 10000,                                                           \
      cuDeviceGetLuid)                                                                  \
    U(cuDeviceGetMemPool, 11020,                                                        \
      cuDeviceGetMemPool)                                                               \
    U(cuDeviceGetNvSciSyncAttributes, 10020,                                            \
      cuDeviceGetNvSciSyncAttributes)                                                   \
    U(cuDeviceGetP2PAtomicCapabilities, 13000,                                          \
      cuDeviceGetP2PAtomicCapabilities)                                                 \
    U(cuDeviceGetProperties, 2000,                                                      \
      cuDeviceGetProperties)                                                            \
    U(cuDeviceGetTexture1DLinearMaxWidth, 11010,                                        \
      cuDeviceGetTexture1DLinearMaxWidth)                                               \
    U(cuDeviceGraphMemTrim, 11040,                                                      \
      cuDeviceGraphMemTrim)                                                             \
    U(cuDeviceRegisterAsyncNotification, 12040,                                         \
      cuDeviceRegisterAsyncNotification)                                                \
    U(cuDeviceSetGraphMemAttribute, 11040,                                              \
      cuDeviceSetGraphMemAttribute)                                                     \
    U(cuDeviceSetMemPool, 11020,                                                        \
      cuDeviceSetMemPool)                                                               \
    U(cuDeviceUnregisterAsyncNotification, 12040,                                       \
      cuDeviceUnregisterAsyncNotification)                                              \
    U(cuExternalMemoryGetMappedBuffer, 10000,                                           \
      cuExternalMemoryGetMappedBuffer)                                                  \
    U(cuExternalMemoryGetMappedMipmappedArray, 10000,                                   \
      cuExternalMemoryGetMappedMipmappedArray)                                          \
    U(cuFlushGPUDirectRDMAWrites, 11030,                                                \
      cuFlushGPUDirectRDMAWrites)                                                       \
    U(cuFuncSetBlockShape, 2000,                                                        \
      cuFuncSetBlockShape)                                                              \
    U(cuFuncSetSharedMemConfig, 4020,                                                   \
      cuFuncSetSharedMemConfig)                                                         \
    U(cuFuncSetSharedSize, 2000,                                                        \
      cuFuncSetSharedSize)                                                              \
    U(cuGraphAddBatchMemOpNode, 11070,                                                  \
      cuGraphAddBatchMemOpNode)                                                         \
    U(cuGraphAddChildGraphNode, 10000,                                                  \
      cuGraphAddChildGraphNode)                                                         \
    U(cuGraphAddEmptyNode, 10000,                                                       \
      cuGraphAddEmptyNode)                                                              \
    U(cuGraphAddEventRecordNode, 11010,                                                 \
      cuGraphAddEventRecordNode)                                                        \
    U(cuGraphAddEventWaitNode, 11010,                                                   \
      cuGraphAddEventWaitNode)                                                          \
    U(cuGraphAddExternalSemaphoresSignalNode, 11020,                                    \
      cuGraphAddExternalSemaphoresSignalNode)                                           \
    U(cuGraphAddExternalSemaphoresWaitNode, 11020,                                      \
      cuGraphAddExternalSemaphoresWaitNode)                                             \
    U(cuGraphAddHostNode, 10000,                                                        \
      cuGraphAddHostNode)                                                               \
    U(cuGraphAddMemAllocNode, 11040,                                                    \
      cuGraphAddMemAllocNode)                                                           \
    U(cuGraphAddMemFreeNode, 11040,                                                     \
      cuGraphAddMemFreeNode)                                                            \
    U(cuGraphAddMemcpyNode, 10000,                                                      \
      cuGraphAddMemcpyNode)                                                             \
    U(cuGraphAddMemsetNode, 10000,                                                      \
      cuGraphAddMemsetNode)                                                             \
    U(cuGraphBatchMemOpNodeGetParams, 11070,                                            \
      cuGraphBatchMemOpNodeGetParams)                                                   \
    U(cuGraphBatchMemOpNodeSetParams, 11070,                                            \
      cuGraphBatchMemOpNodeSetParams)                                                   \
    U(cuGraphChildGraphNodeGetGraph, 10000,                                             \
      cuGraphChildGraphNodeGetGraph)                                                    \
    U(cuGraphClone, 10000,                                                              \
      cuGraphClone)                                                                     \
    U(cuGraphConditionalHandleCreate, 12030,                                            \
      cuGraphConditionalHandleCreate)                                                   \
    U(cuGraphCreate, 10000,                                                             \
      cuGraphCreate)                                                                    \
    U(cuGraphDebugDotPrint, 11030,                                                      \
      cuGraphDebugDotPrint)                                                             \
    U(cuGraphDestroyNode, 10000,                                                        \
      cuGraphDestroyNode)                                                               \
    U(cuGraphEventRecordNodeGetEvent, 11010,                                            \
      cuGraphEventRecordNodeGetEvent)                                                   \
    U(cuGraphEventRecordNodeSetEvent, 11010,                                            \
      cuGraphEventRecordNodeSetEvent)                                                   \
    U(cuGraphEventWaitNodeGetEvent, 11010,                                              \
      cuGraphEventWaitNodeGetEvent)                                                     \
    U(cuGraphEventWaitNodeSetEvent, 11010,                                              \
      cuGraphEventWaitNodeSetEvent)                                                     \
    U(cuGraphExecBatchMemOpNodeSetParams, 11070,                                        \
      cuGraphExecBatchMemOpNodeSetParams)                                               \
    U(cuGraphExecChildGraphNodeSetParams, 11010,                                        \
      cuGraphExecChildGraphNodeSetParams)                                               \
    U(cuGraphExecEventRecordNodeSetEvent, 11010,                                        \
      cuGraphExecEventRecordNodeSetEvent)                                               \
    U(cuGraphExecEventWaitNodeSetEvent, 11010,                                          \
      cuGraphExecEventWaitNodeSetEvent)                                                 \
    U(cuGraphExecExternalSemaphoresSignalNodeSetParams, 11020,                          \
      cuGraphExecExternalSemaphoresSignalNodeSetParams)                                 \
    U(cuGraphExecExternalSemaphoresWaitNodeSetParams, 11020,                            \
      cuGraphExecExternalSemaphoresWaitNodeSetParams)                                   \
    U(cuGraphExecGetFlags, 12000,                                                       \
      cuGraphExecGetFlags)                                                              \
    U(cuGraphExecHostNodeSetParams, 10020,                                              \
      cuGraphExecHostNodeSetParams)                                                     \
    U(cuGraphExecMemcpyNodeSetParams, 10020,                                            \
      cuGraphExecMemcpyNodeSetParams)                                                   \
    U(cuGraphExecMemsetNodeSetParams, 10020,                                            \
      cuGraphExecMemsetNodeSetParams)                                                   \
    U(cuGraphExecNodeSetParams, 12020,                                                  \
      cuGraphExecNodeSetParams)                                                         \
    U(cuGraphExternalSemaphoresSignalNodeGetParams, 11020,                              \
      cuGraphExternalSemaphoresSignalNodeGetParams)                                     \
    U(cuGraphExternalSemaphoresSignalNodeSetParams, 11020,                              \
      cuGraphExternalSemaphoresSignalNodeSetParams)                                     \
    U(cuGraphExternalSemaphoresWaitNodeGetParams, 11020,                                \
      cuGraphExternalSemaphoresWaitNodeGetParams)                                       \
    U(cuGraphExternalSemaphoresWaitNodeSetParams, 11020,                                \
      cuGraphExternalSemaphoresWaitNodeSetParams)                                       \
    U(cuGraphGetRootNodes, 10000,                                                       \
      cuGraphGetRootNodes)                                                              \
    U(cuGraphHostNodeGetParams, 10000,                                                  \
      cuGraphHostNodeGetParams)                                                         \
    U(cuGraphHostNodeSetParams, 10000,                                                  \
      cuGraphHostNodeSetParams)                                                         \
    U(cuGraphKernelNodeCopyAttributes, 11000,                                           \
      cuGraphKernelNodeCopyAttributes)                                                  \
    U(cuGraphKernelNodeGetAttribute, 11000,                                             \
      cuGraphKernelNodeGetAttribute)                                                    \
    U(cuGraphKernelNodeSetAttribute, 11000,                                             \
      cuGraphKernelNodeSetAttribute)                                                    \
    U(cuGraphMemAllocNodeGetParams, 11040,                                              \
      cuGraphMemAllocNodeGetParams)                                                     \
    U(cuGraphMemFreeNodeGetParams, 11040,                                               \
      cuGraphMemFreeNodeGetParams)                                                      \
    U(cuGraphMemcpyNodeGetParams, 10000,                                                \
      cuGraphMemcpyNodeGetParams)                                                       \
    U(cuGraphMemcpyNodeSetParams, 10000,                                                \
      cuGraphMemcpyNodeSetParams)                                                       \
    U(cuGraphMemsetNodeGetParams, 10000,                                                \
      cuGraphMemsetNodeGetParams)                                                       \
    U(cuGraphMemsetNodeSetParams, 10000,                                                \
      cuGraphMemsetNodeSetParams)                                                       \
    U(cuGraphNodeFindInClone, 10000,                                                    \
      cuGraphNodeFindInClone)                                                           \
    U(cuGraphNodeGetEnabled, 11060,                                                     \
      cuGraphNodeGetEnabled)                                                            \
    U(cuGraphNodeGetType, 10000,                                                        \
      cuGraphNodeGetType)                                                               \
    U(cuGraphNodeSetEnabled, 11060,                                                     \
      cuGraphNodeSetEnabled)                                                            \
    U(cuGraphNodeSetParams, 12020,                                                      \
      cuGraphNodeSetParams)                                                             \
    U(cuGraphReleaseUserObject, 11030,                                                  \
      cuGraphReleaseUserObject)                                                         \
    U(cuGraphRetainUserObject, 11030,                                                   \
      cuGraphRetainUserObject)                                                          \
    U(cuGraphicsResourceGetMappedMipmappedArray, 5000,                                  \
      cuGraphicsResourceGetMappedMipmappedArray)                                        \
    U(cuGraphicsSubResourceGetMappedArray, 3000,                                        \
      cuGraphicsSubResourceGetMappedArray)                                              \
    U(cuGraphicsUnregisterResource, 3000,                                               \
      cuGraphicsUnregisterResource)                                                     \
    U(cuGreenCtxCreate, 12040,                                                          \
      cuGreenCtxCreate)                                                                 \
    U(cuGreenCtxDestroy, 12040,                                                         \
      cuGreenCtxDestroy)                                                                \
    U(cuGreenCtxGetDevResource, 12040,                                                  \
      cuGreenCtxGetDevResource)                                                         \
    U(cuGreenCtxGetId, 12090,                                                           \
      cuGreenCtxGetId)                                                                  \
    U(cuGreenCtxRecordEvent, 12040,                                                     \
      cuGreenCtxRecordEvent)                                                            \
    U(cuGreenCtxStreamCreate, 12050,                                                    \
      cuGreenCtxStreamCreate)                                                           \
    U(cuGreenCtxWaitEvent, 12040,                                                       \
      cuGreenCtxWaitEvent)                                                              \
    U(cuImportExternalMemory, 10000,                                                    \
      cuImportExternalMemory)                                                           \
    U(cuImportExternalSemaphore, 10000,                                                 \
      cuImportExternalSemaphore)                                                        \
    U(cuIpcCloseMemHandle, 4010,                                                        \
      cuIpcCloseMemHandle)                                                              \
    U(cuIpcGetEventHandle, 4010,                                                        \
      cuIpcGetEventHandle)                                                              \
    U(cuIpcGetMemHandle, 4010,                                                          \
      cuIpcGetMemHandle)                                                                \
    U(cuIpcOpenEventHandle, 4010,                                                       \
      cuIpcOpenEventHandle)                                                             \
    U(cuKernelSetCacheConfig, 12000,                                                    \
      cuKernelSetCacheConfig)                                                           \
    U(cuLaunch, 2000,                                                                   \
      cuLaunch)                                                                         \
    U(cuLaunchCooperativeKernelMultiDevice, 9000,                                       \
      cuLaunchCooperativeKernelMultiDevice)                                             \
    U(cuLaunchGrid, 2000,                                                               \
      cuLaunchGrid)                                                                     \
    U(cuLaunchGridAsync, 2000,                                                          \
      cuLaunchGridAsync)                                                                \
    U(cuLibraryGetUnifiedFunction, 12000,                                               \
      cuLibraryGetUnifiedFunction)                                                      \
    U(cuLogsCurrent, 12090,                                                             \
      cuLogsCurrent)                                                                    \
    U(cuLogsDumpToFile, 12090,                                                          \
      cuLogsDumpToFile)                                                                 \
    U(cuLogsDumpToMemory, 12090,                                                        \
      cuLogsDumpToMemory)                                                               \
    U(cuLogsRegisterCallback, 12090,                                                    \
      cuLogsRegisterCallback)                                                           \
    U(cuLogsUnregisterCallback, 12090,                                                  \
      cuLogsUnregisterCallback)                                                         \
    U(cuMemAllocManaged, 6000,                                                          \
      cuMemAllocManaged)                                                                \
    U(cuMemGetDefaultMemPool, 13000,                                                    \
      cuMemGetDefaultMemPool)                                                           \
    U(cuMemGetHandleForAddressRange, 11070,                                             \
      cuMemGetHandleForAddressRange)                                                    \
    U(cuMemGetMemPool, 13000,                                                           \
      cuMemGetMemPool)                                                                  \
    U(cuMemPoolCreate, 11020,                                                           \
      cuMemPoolCreate)                                                                  \
    U(cuMemPoolDestroy, 11020,                                                          \
      cuMemPoolDestroy)                                                                 \
    U(cuMemPoolExportPointer, 11020,                                                    \
      cuMemPoolExportPointer)                                                           \
    U(cuMemPoolExportToShareableHandle, 11020,                                          \
      cuMemPoolExportToShareableHandle)                                                 \
    U(cuMemPoolGetAccess, 11020,                                                        \
      cuMemPoolGetAccess)                                                               \
    U(cuMemPoolGetAttribute, 11020,                                                     \
      cuMemPoolGetAttribute)                                                            \
    U(cuMemPoolImportFromShareableHandle, 11020,                                        \
      cuMemPoolImportFromShareableHandle)                                               \
    U(cuMemPoolImportPointer, 11020,                                                    \
      cuMemPoolImportPointer)                                                           \
    U(cuMemPoolSetAccess, 11020,                                                        \
      cuMemPoolSetAccess)                                                               \
    U(cuMemPoolSetAttribute, 11020,                                                     \
      cuMemPoolSetAttribute)                                                            \
    U(cuMemPoolTrimTo, 11020,                                                           \
      cuMemPoolTrimTo)                                                                  \
    U(cuMemRangeGetAttribute, 8000,                                                     \
      cuMemRangeGetAttribute)                                                           \
    U(cuMemRangeGetAttributes, 8000,                                                    \
      cuMemRangeGetAttributes)                                                          \
    U(cuMemSetMemPool, 13000,                                                           \
      cuMemSetMemPool)                                                                  \
    U(cuMipmappedArrayCreate, 5000,                                                     \
      cuMipmappedArrayCreate)                                                           \
    U(cuMipmappedArrayDestroy, 5000,                                                    \
      cuMipmappedArrayDestroy)                                                          \
    U(cuMipmappedArrayGetLevel, 5000,                                                   \
      cuMipmappedArrayGetLevel)                                                         \
    U(cuMipmappedArrayGetMemoryRequirements, 11060,                                     \
      cuMipmappedArrayGetMemoryRequirements)                                            \
    U(cuMipmappedArrayGetSparseProperties, 11010,                                       \
      cuMipmappedArrayGetSparseProperties)                                              \
    U(cuModuleGetSurfRef, 3000,                                                         \
      cuModuleGetSurfRef)                                                               \
    U(cuModuleGetTexRef, 2000,                                                          \
      cuModuleGetTexRef)                                                                \
    U(cuMulticastAddDevice, 12010,                                                      \
      cuMulticastAddDevice)                                                             \
    U(cuMulticastBindAddr, 12010,                                                       \
      cuMulticastBindAddr)                                                              \
    U(cuMulticastBindMem, 12010,                                                        \
      cuMulticastBindMem)                                                               \
    U(cuMulticastCreate, 12010,                                                         \
      cuMulticastCreate)                                                                \
    U(cuMulticastGetGranularity, 12010,                                                 \
      cuMulticastGetGranularity)                                                        \
    U(cuMulticastUnbind, 12010,                                                         \
      cuMulticastUnbind)                                                                \
    U(cuOccupancyMaxActiveClusters, 11070,                                              \
      cuOccupancyMaxActiveClusters)                                                     \
    U(cuOccupancyMaxPotentialClusterSize, 11070,                                        \
      cuOccupancyMaxPotentialClusterSize)                                               \
    U(cuParamSetSize, 2000,                                                             \
      cuParamSetSize)                                                                   \
    U(cuParamSetTexRef, 2000,                                                           \
      cuParamSetTexRef)                                                                 \
    U(cuParamSetf, 2000,                                                                \
      cuParamSetf)                                                                      \
    U(cuParamSeti, 2000,                                                                \
      cuParamSeti)                                                                      \
    U(cuParamSetv, 2000,                                                                \
      cuParamSetv)                                                                      \
    U(cuStreamGetGreenCtx, 12040,                                                       \
      cuStreamGetGreenCtx)                                                              \
    U(cuSurfObjectCreate, 5000,                                                         \
      cuSurfObjectCreate)                                                               \
    U(cuSurfObjectDestroy, 5000,                                                        \
      cuSurfObjectDestroy)                                                              \
    U(cuSurfObjectGetResourceDesc, 5000,                                                \
      cuSurfObjectGetResourceDesc)                                                      \
    U(cuSurfRefGetArray, 3000,                                                          \
      cuSurfRefGetArray)                                                                \
    U(cuSurfRefSetArray, 3000,                                                          \
      cuSurfRefSetArray)                                                                \
    U(cuTensorMapEncodeIm2col, 12000,                                                   \
      cuTensorMapEncodeIm2col)                                                          \
    U(cuTensorMapEncodeIm2colWide, 12080,                                               \
      cuTensorMapEncodeIm2colWide)                                                      \
    U(cuTensorMapEncodeTiled, 12000,                                                    \
      cuTensorMapEncodeTiled)                                                           \
    U(cuTensorMapReplaceAddress, 12000,                                                 \
      cuTensorMapReplaceAddress)                                                        \
    U(cuTexObjectCreate, 5000,                                                          \
      cuTexObjectCreate)                                                                \
    U(cuTexObjectDestroy, 5000,                                                         \
      cuTexObjectDestroy)                                                               \
    U(cuTexObjectGetResourceDesc, 5000,                                                 \
      cuTexObjectGetResourceDesc)                                                       \
    U(cuTexObjectGetResourceViewDesc, 5000,                                             \
      cuTexObjectGetResourceViewDesc)                                                   \
    U(cuTexObjectGetTextureDesc, 5000,                                                  \
      cuTexObjectGetTextureDesc)                                                        \
    U(cuTexRefCreate, 2000,                                                             \
      cuTexRefCreate)                                                                   \
    U(cuTexRefDestroy, 2000,                                                            \
      cuTexRefDestroy)                                                                  \
    U(cuTexRefGetAddressMode, 2000,                                                     \
      cuTexRefGetAddressMode)                                                           \
    U(cuTexRefGetArray, 2000,                                                           \
      cuTexRefGetArray)                                                                 \
    U(cuTexRefGetBorderColor, 8000,                                                     \
      cuTexRefGetBorderColor)                                                           \
    U(cuTexRefGetFilterMode, 2000,                                                      \
      cuTexRefGetFilterMode)                                                            \
    U(cuTexRefGetFlags, 2000,                                                           \
      cuTexRefGetFlags)                                                                 \
    U(cuTexRefGetFormat, 2000,                                                          \
      cuTexRefGetFormat)                                                                \
    U(cuTexRefGetMaxAnisotropy, 5000,                                                   \
      cuTexRefGetMaxAnisotropy)                                                         \
    U(cuTexRefGetMipmapFilterMode, 5000,                                                \
      cuTexRefGetMipmapFilterMode)                                                      \
    U(cuTexRefGetMipmapLevelBias, 5000,                                                 \
      cuTexRefGetMipmapLevelBias)                                                       \
    U(cuTexRefGetMipmapLevelClamp, 5000,                                                \
      cuTexRefGetMipmapLevelClamp)                                                      \
    U(cuTexRefGetMipmappedArray, 5000,                                                  \
      cuTexRefGetMipmappedArray)                                                        \
    U(cuTexRefSetAddressMode, 2000,                                                     \
      cuTexRefSetAddressMode)                                                           \
    U(cuTexRefSetArray, 2000,                                                           \
      cuTexRefSetArray)                                                                 \
    U(cuTexRefSetBorderColor, 8000,                                                     \
      cuTexRefSetBorderColor)                                                           \
    U(cuTexRefSetFilterMode, 2000,                                                      \
      cuTexRefSetFilterMode)                                                            \
    U(cuTexRefSetFlags, 2000,                                                           \
      cuTexRefSetFlags)                                                                 \
    U(cuTexRefSetFormat, 2000,                                                          \
      cuTexRefSetFormat)                                                                \
    U(cuTexRefSetMaxAnisotropy, 5000,                                                   \
      cuTexRefSetMaxAnisotropy)                                                         \
    U(cuTexRefSetMipmapFilterMode, 5000,                                                \
      cuTexRefSetMipmapFilterMode)                                                      \
    U(cuTexRefSetMipmapLevelBias, 5000,                                                 \
      cuTexRefSetMipmapLevelBias)                                                       \
    U(cuTexRefSetMipmapLevelClamp, 5000,                                                \
      cuTexRefSetMipmapLevelClamp)                                                      \
    U(cuTexRefSetMipmappedArray, 5000,                                                  \
      cuTexRefSetMipmappedArray)                                                        \
    U(cuUserObjectCreate, 11030,                                                        \
      cuUserObjectCreate)                                                               \
    U(cuUserObjectRelease, 11030,                                                       \
      cuUserObjectRelease)                                                              \
    U(cuUserObjectRetain, 11030, cuUserObjectRetain)                                    \
    U(cuLinkComplete, 5050, cuLinkComplete)                                             \
    U(cuLinkDestroy, 5050, cuLinkDestroy)                                               \
    U(cuProfilerInitialize, 4000, cuProfilerInitialize)

/* Older ABIs of the functions above, each under the name NVIDIA's driver
 * still exports for it (cuda.h's __CUDA_API_VERSION_INTERNAL section) and
 * answered by cuGetProcAddress for the versions cudaTypedefs.h gives them:
 * CUDA 13.0's runtime asks for these by their old versions at start-up. The
 * 32-bit-size v1 functions (CUdeviceptr_v1, unsigned int sizes) stay out,
 * as in legacy.c. */
#define SIM_UNSUPPORTED_OLD_ABI(U, UP)                                                  \
    U(cuLinkCreate, 5050, cuLinkCreate)                                                 \
    U(cuLinkAddData, 5050, cuLinkAddData)                                               \
    U(cuLinkAddFile, 5050, cuLinkAddFile)                                               \
    UP(cuMemcpyBatchAsync, 12080, cuMemcpyBatchAsync, cuMemcpyBatchAsync_ptsz)          \
    UP(cuMemcpy3DBatchAsync, 12080, cuMemcpy3DBatchAsync, cuMemcpy3DBatchAsync_ptsz)    \
    UP(cuStreamWaitValue32, 8000, cuStreamWaitValue32, cuStreamWaitValue32_ptsz)        \
    UP(cuStreamWriteValue32, 8000, cuStreamWriteValue32, cuStreamWriteValue32_ptsz)     \
    UP(cuStreamWaitValue64, 9000, cuStreamWaitValue64, cuStreamWaitValue64_ptsz)        \
    UP(cuStreamWriteValue64, 9000, cuStreamWriteValue64, cuStreamWriteValue64_ptsz)     \
    UP(cuStreamBatchMemOp, 8000, cuStreamBatchMemOp, cuStreamBatchMemOp_ptsz)           \
    U(cuIpcOpenMemHandle, 4010, cuIpcOpenMemHandle)                                     \
    U(cuMemAdvise, 8000, cuMemAdvise)                                                   \
    UP(cuMemPrefetchAsync, 8000, cuMemPrefetchAsync, cuMemPrefetchAsync_ptsz)           \
    U(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode)                                \
    U(cuGraphKernelNodeGetParams, 10000, cuGraphKernelNodeGetParams)                    \
    U(cuGraphKernelNodeSetParams, 10000, cuGraphKernelNodeSetParams)                    \
    U(cuGraphExecKernelNodeSetParams, 10010, cuGraphExecKernelNodeSetParams)            \
    U(cuGraphExecUpdate, 10020, cuGraphExecUpdate)                                      \
    U(cuGraphGetEdges, 10000, cuGraphGetEdges)                                          \
    U(cuGraphNodeGetDependencies, 10000, cuGraphNodeGetDependencies)                    \
    U(cuGraphNodeGetDependentNodes, 10000, cuGraphNodeGetDependentNodes)                \
    U(cuGraphAddDependencies, 10000, cuGraphAddDependencies)                            \
    U(cuGraphRemoveDependencies, 10000, cuGraphRemoveDependencies)                      \
    U(cuGraphAddNode, 12020, cuGraphAddNode)                                            \
    UP(cuStreamUpdateCaptureDependencies, 11030, cuStreamUpdateCaptureDependencies,     \
       cuStreamUpdateCaptureDependencies_ptsz)                                          \
    U(cuGraphicsResourceSetMapFlags, 3000, cuGraphicsResourceSetMapFlags)               \
    U(cuTexRefSetAddress2D, 3020, cuTexRefSetAddress2D_v2)

#endif
