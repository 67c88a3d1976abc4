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
    U(cuMemAdvise, 12020, cuMemAdvise_v2)                                               \
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
    U(cuArrayCreate, 3020, cuArrayCreate_v2)                                            \
    U(cuArrayGetDescriptor, 3020, cuArrayGetDescriptor_v2)                              \
    U(cuArray3DCreate, 3020, cuArray3DCreate_v2)                                        \
    U(cuArray3DGetDescriptor, 3020, cuArray3DGetDescriptor_v2)                          \
    U(cuTexRefSetAddress, 3020, cuTexRefSetAddress_v2)                                  \
    U(cuTexRefGetAddress, 3020, cuTexRefGetAddress_v2)                                  \
    U(cuTexRefSetAddress2D, 4010, cuTexRefSetAddress2D_v3)                              \
    U(cuGraphicsResourceGetMappedPointer, 3020, cuGraphicsResourceGetMappedPointer_v2)  \
    U(cuGraphicsResourceSetMapFlags, 6050, cuGraphicsResourceSetMapFlags_v2)            \
    UP(cuGraphicsMapResources, 3000, cuGraphicsMapResources, cuGraphicsMapResources_ptsz) \
    UP(cuGraphicsUnmapResources, 3000, cuGraphicsUnmapResources, cuGraphicsUnmapResources_ptsz) \
    U(cuLinkCreate, 6050, cuLinkCreate_v2)                                              \
    U(cuLinkAddData, 6050, cuLinkAddData_v2)                                            \
    U(cuLinkAddFile, 6050, cuLinkAddFile_v2)                                            \
    U(cuIpcOpenMemHandle, 11000, cuIpcOpenMemHandle_v2)                                 \
    UP(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz) \
    UP(cuStreamBeginCaptureToGraph, 12030, cuStreamBeginCaptureToGraph,                 \
       cuStreamBeginCaptureToGraph_ptsz)                                                \
    UP(cuStreamEndCapture, 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz)          \
    UP(cuStreamUpdateCaptureDependencies, 12030, cuStreamUpdateCaptureDependencies_v2,  \
       cuStreamUpdateCaptureDependencies_v2_ptsz)                                       \
    U(cuGraphInstantiate, 11040, cuGraphInstantiateWithFlags)                           \
    UP(cuGraphInstantiateWithParams, 12000, cuGraphInstantiateWithParams,               \
       cuGraphInstantiateWithParams_ptsz)                                               \
    U(cuGraphExecUpdate, 12000, cuGraphExecUpdate_v2)                                   \
    U(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2)                             \
    U(cuGraphKernelNodeGetParams, 12000, cuGraphKernelNodeGetParams_v2)                 \
    U(cuGraphKernelNodeSetParams, 12000, cuGraphKernelNodeSetParams_v2)                 \
    U(cuGraphExecKernelNodeSetParams, 12000, cuGraphExecKernelNodeSetParams_v2)         \
    U(cuGraphGetEdges, 12030, cuGraphGetEdges_v2)                                       \
    U(cuGraphNodeGetDependencies, 12030, cuGraphNodeGetDependencies_v2)                 \
    U(cuGraphNodeGetDependentNodes, 12030, cuGraphNodeGetDependentNodes_v2)             \
    U(cuGraphAddDependencies, 12030, cuGraphAddDependencies_v2)                         \
    U(cuGraphRemoveDependencies, 12030, cuGraphRemoveDependencies_v2)                   \
    U(cuGraphAddNode, 12030, cuGraphAddNode_v2)                                         \
    UP(cuGraphUpload, 11010, cuGraphUpload, cuGraphUpload_ptsz)                         \
    UP(cuGraphLaunch, 10000, cuGraphLaunch, cuGraphLaunch_ptsz)                         \
    UP(cuStreamWriteValue32, 11070, cuStreamWriteValue32_v2, cuStreamWriteValue32_v2_ptsz) \
    UP(cuStreamWaitValue32, 11070, cuStreamWaitValue32_v2, cuStreamWaitValue32_v2_ptsz) \
    UP(cuStreamWriteValue64, 11070, cuStreamWriteValue64_v2, cuStreamWriteValue64_v2_ptsz) \
    UP(cuStreamWaitValue64, 11070, cuStreamWaitValue64_v2, cuStreamWaitValue64_v2_ptsz) \
    UP(cuStreamBatchMemOp, 11070, cuStreamBatchMemOp_v2, cuStreamBatchMemOp_v2_ptsz)   \
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
       cuMemBatchDecompressAsync_ptsz)

#endif
